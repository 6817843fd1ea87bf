"""Helpers for tests that run playbooks against real LXC containers of the local lab."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PCT = REPO / "tests" / "standins" / "pct"
LAB_INVENTORY = REPO / "inventory" / "lab"
VENV_BIN = Path(sys.executable).parent
_RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)",
    re.M,
)


def lab_root() -> Path:
    return Path(os.environ.get("PCT_STANDIN_ROOT", "/var/lib/sglang-lxc-lab"))


def lab_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        PATH=os.pathsep.join([str(VENV_BIN), env.get("PATH", "")]),
        PYTHONUNBUFFERED="1",
    )
    # the todo callback's run folders go to /tmp, not into the checkout's artifacts/
    env.setdefault("SGLANG_LXC_ARTIFACTS",
                   str(Path(tempfile.gettempdir()) / "sglang-lxc-test-artifacts"))
    env.update(extra)
    return env


def missing_for_lab() -> str | None:
    """Why lab tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "lab tests need root"
    for cmd in ("lxc-start", "debootstrap", "zstd"):
        if shutil.which(cmd) is None:
            return f"lab tests need {cmd} (apt-get install lxc debootstrap zstd)"
    return None


@dataclass
class PlaybookResult:
    rc: int
    output: str
    stats: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def changed(self) -> int:
        return sum(s["changed"] for s in self.stats.values())

    @property
    def failed(self) -> int:
        return sum(s["failed"] + s["unreachable"] for s in self.stats.values())

    def __str__(self) -> str:  # shown by pytest when an assertion on the result fails
        return f"rc={self.rc} stats={self.stats}\n{self.output[-6000:]}"


def ansible_playbook(
    playbook: str | Path | list,
    inventory: str | Path,
    extra_vars: dict | None = None,
    check: bool = False,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    timeout: int = 1800,
) -> PlaybookResult:
    books = playbook if isinstance(playbook, list) else [playbook]
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory),
           *[str(REPO / b) for b in books]]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    if check:
        cmd += ["--check"]
    cmd += args or []
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        env=lab_env(**(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    stats = {
        m["host"]: {k: int(v) for k, v in m.groupdict().items() if k != "host"}
        for m in _RECAP.finditer(proc.stdout)
    }
    return PlaybookResult(proc.returncode, proc.stdout, stats)


def pct(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(PCT), *args], capture_output=True, text=True, check=check, env=lab_env()
    )


@dataclass
class LabContainer:
    """A real LXC container made through the proxmox_lxc role, reachable over SSH."""

    vmid: int
    workdir: Path
    spec: dict

    @property
    def name(self) -> str:
        return f"ct{self.vmid}"

    @property
    def ip(self) -> str:
        return self.spec["ip"].split("/")[0]

    @property
    def inventory(self) -> Path:
        return self.workdir / "inventory" / "hosts.yml"

    @property
    def node_vars(self) -> Path:
        return self.workdir / "node-vars.json"

    def provision(self, extra_vars: dict | None = None, check: bool = False) -> PlaybookResult:
        """Run the proxmox_lxc role for this container on the lab node."""
        return ansible_playbook(
            "playbooks/containers.yml",
            LAB_INVENTORY,
            extra_vars={"proxmox_lxc_containers": [self.spec], **(extra_vars or {})},
            check=check,
        )

    def run_playbook(
        self,
        playbook: str | Path,
        extra_vars: dict | None = None,
        check: bool = False,
        args: list[str] | None = None,
    ) -> PlaybookResult:
        """Run a playbook against this container (inventory group sglang_servers)."""
        return ansible_playbook(
            playbook, self.inventory, extra_vars=extra_vars, check=check,
            args=["--limit", self.name, *(args or [])],
        )

    def exec(self, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run a command in the container through pct exec (no SSH)."""
        return pct("exec", str(self.vmid), "--", *command, check=check)

    def testinfra(self, *test_files: str, extra: list[str] | None = None):
        """Run testinfra checks from tests/infra against this container; returns the process."""
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
             *[str(REPO / f) for f in test_files],
             f"--hosts=ansible://{self.name}", f"--ansible-inventory={self.inventory}",
             "--rootdir", str(REPO / "tests" / "infra"), *(extra or [])],
            cwd=REPO, env=lab_env(), capture_output=True, text=True, timeout=900,
        )

    def destroy(self) -> None:
        pct("shutdown", str(self.vmid), "--timeout", "30", "--forceStop", "1", check=False)
        pct("destroy", str(self.vmid), check=False)
        # an LXC container left without its Proxmox config by an interrupted run
        lxc_path = os.environ.get("PCT_STANDIN_LXC_PATH", "/var/lib/lxc")
        if (Path(lxc_path) / str(self.vmid)).exists():
            subprocess.run(["lxc-destroy", "-f", "-P", lxc_path, "-n", str(self.vmid)],
                           capture_output=True, check=False)
        shutil.rmtree(lab_root() / "data" / self.name, ignore_errors=True)


def node_cache_mounts(wheels: str | Path | None = None, uv_cache: str | Path | None = None
                      ) -> list[dict]:
    """The node cache's mounts, as inventory/lab gives them to the lab's containers: the node's
    wheel folder read-only (default: the controller wheelhouse, the lab's node is this machine)
    and uv's cache read-write (default: the lab's node-cache/uv)."""
    wheels = wheels or Path.home() / ".cache" / "sglang-lxc" / "wheelhouse"
    uv_cache = uv_cache or lab_root() / "node-cache" / "uv"
    return [
        {"host_path": str(wheels), "path": "/var/cache/sglang-lxc/node/wheelhouse",
         "read_only": True},
        {"host_path": str(uv_cache), "path": "/var/cache/sglang-lxc/node/uv"},
    ]


def write_inventory(ct: LabContainer) -> None:
    """An inventory with the lab's group_vars and this one container in sglang_servers."""
    inv = ct.workdir / "inventory"
    inv.mkdir(parents=True, exist_ok=True)
    group_vars = inv / "group_vars"
    if not group_vars.exists():
        group_vars.symlink_to(LAB_INVENTORY / "group_vars")
    (inv / "hosts.yml").write_text(
        "all:\n  children:\n    sglang_servers:\n      hosts:\n"
        f"        {ct.name}:\n          ansible_host: {ct.ip}\n"
    )
