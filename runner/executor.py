"""Run ansible-playbook through ansible-runner."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import ansible_runner

from .errors import RunError
from .paths import PROJECT_ROOT


def run_playbook(
    playbook: str,
    inventories: list[str],
    extra_args: list[str],
    artifacts: str = "artifacts",
) -> int:
    """Run ``playbook`` against ``inventories``; return ansible-playbook's exit code."""
    playbook_path = Path(playbook).resolve()
    if not playbook_path.is_file():
        raise RunError(f"playbook not found: {playbook}")
    artifact_dir = Path(artifacts).resolve()
    artifact_dir.mkdir(parents=True, exist_ok=True)
    cmdline = " ".join(_quote(a) for a in extra_args)
    bindir = str(Path(sys.executable).parent)
    envvars = {
        "ANSIBLE_CONFIG": str(PROJECT_ROOT / "ansible.cfg"),
        # ansible-playbook comes from the same environment as this program.
        "PATH": os.pathsep.join([bindir, os.environ.get("PATH", "")]),
    }
    if "ANSIBLE_FORCE_COLOR" not in os.environ:
        envvars["ANSIBLE_FORCE_COLOR"] = "0"
    result = ansible_runner.run(
        private_data_dir=str(artifact_dir),
        artifact_dir=str(artifact_dir),
        project_dir=str(playbook_path.parent),
        playbook=str(playbook_path),
        inventory=[str(Path(i).resolve()) for i in inventories],
        cmdline=cmdline or None,
        envvars=envvars,
        quiet=False,
    )
    return int(result.rc if result.rc is not None else 1)


def _quote(arg: str) -> str:
    import shlex

    return shlex.quote(arg)
