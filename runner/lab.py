"""``sglang-lxc lab up|down|status``: this machine as a lab Proxmox node over real LXC."""

from __future__ import annotations

import logging
import os
import shutil
import subprocess

from .errors import PrerequisiteError
from .executor import run_playbook
from .paths import PROJECT_ROOT

log = logging.getLogger(__name__)

LAB_INVENTORY = PROJECT_ROOT / "inventory" / "lab"
LAB_ROOT = os.environ.get("PCT_STANDIN_ROOT", "/var/lib/sglang-lxc-lab")
PCT = PROJECT_ROOT / "tests" / "standins" / "pct"
BRIDGE = os.environ.get("SGLANG_LXC_LAB_BRIDGE", "lxcbr0")

# command -> Debian package that provides it
PREREQUISITES = {
    "lxc-start": "lxc",
    "lxc-attach": "lxc",
    "debootstrap": "debootstrap",
    "zstd": "zstd",
    "ip": "iproute2",
    "ssh": "openssh-client",
    "ssh-keygen": "openssh-client",
}


def missing_prerequisites() -> list[str]:
    """Human-readable list of what the lab needs and this machine lacks."""
    problems = []
    if os.geteuid() != 0:
        problems.append("root (run as root: the lab creates LXC containers and a bridge)")
    packages = sorted({pkg for cmd, pkg in PREREQUISITES.items() if shutil.which(cmd) is None})
    if packages:
        problems.append("packages: apt-get install -y " + " ".join(packages))
    return problems


def check_prerequisites() -> None:
    problems = missing_prerequisites()
    if problems:
        raise PrerequisiteError("the lab needs: " + "; ".join(problems))


def up(containers: int = 1, artifacts: str = "artifacts") -> int:
    check_prerequisites()
    os.environ["SGLANG_LXC_LAB_CONTAINERS"] = str(containers)
    return run_playbook(
        str(PROJECT_ROOT / "playbooks" / "lab.yml"), [str(LAB_INVENTORY)], [], artifacts=artifacts
    )


def down(artifacts: str = "artifacts") -> int:
    check_prerequisites()
    return run_playbook(
        str(PROJECT_ROOT / "playbooks" / "lab_down.yml"),
        [str(LAB_INVENTORY)],
        [],
        artifacts=artifacts,
    )


def status() -> int:
    """Print the lab's containers and bridge; 0 when the lab is up, 1 when it is not."""
    bridge = subprocess.run(
        ["ip", "-o", "-4", "addr", "show", "dev", BRIDGE], capture_output=True, text=True,
        check=False,
    )
    print(f"bridge {BRIDGE}: " + (bridge.stdout.split()[3] if bridge.returncode == 0
                                  and bridge.stdout.split()[3:] else "absent"))
    listing = subprocess.run([str(PCT), "list"], capture_output=True, text=True, check=False,
                             env={**os.environ, "PCT_STANDIN_ROOT": LAB_ROOT})
    print(listing.stdout.rstrip() or "no lab containers")
    return 0 if bridge.returncode == 0 and listing.stdout.strip() else 1


def main(action: str, containers: int = 1) -> int:
    if action == "up":
        return up(containers)
    if action == "down":
        return down()
    return status()
