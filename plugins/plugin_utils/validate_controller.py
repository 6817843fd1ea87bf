"""The controller: the SSH public key to install, the wheelhouse's free space, tools on PATH,
and how an unreachable node is named.

Part of the validation pass (action ``sglang_lxc_validate``); unit-tested in tests/unit/validate.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_common import (
    UNSET,
    problem,
)

# Free space the wheelhouse needs for the SGLang stack (about 4.1 GB of wheels) and the toolchain.
WHEELHOUSE_MIN_FREE_GIB = 8
# Tools the controller itself runs.
CONTROLLER_TOOLS = {"ssh": "apt-get install openssh-client"}


def controller_problems(
    key_errors: Mapping[str, str],
    wheelhouse: str | None,
    min_free_gib: float = WHEELHOUSE_MIN_FREE_GIB,
    tools: Mapping[str, str] | None = None,
    need_ssh: bool = True,
) -> list[str]:
    tools = CONTROLLER_TOOLS if tools is None else tools
    out = []
    for host, error in sorted(key_errors.items()):
        out.append(
            problem(
                host,
                "proxmox_lxc_ssh_public_key",
                UNSET,
                f"the controller cannot read the SSH public key to install ({error})",
                "make a key with `ssh-keygen -t ed25519 -f ~/.ssh/id_ed25519`, or point "
                "proxmox_lxc_ssh_public_key at an existing .pub file",
            )
        )
    if wheelhouse:
        path = Path(os.path.expanduser(wheelhouse))
        probe = path
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        free = shutil.disk_usage(probe).free / 2**30
        if free < min_free_gib:
            out.append(
                problem(
                    "controller",
                    "sglang_lxc_wheelhouse",
                    str(path),
                    f"only {free:.1f} GiB free on {probe} "
                    f"(the wheels need about {min_free_gib} GiB)",
                    f"free space there (`du -sh {path}/*` shows old wheels) or point "
                    "sglang_lxc_wheelhouse at a larger disk",
                )
            )
    for tool, fix in tools.items():
        if tool == "ssh" and not need_ssh:
            continue
        if shutil.which(tool) is None:
            out.append(problem("controller", "PATH", UNSET, f"{tool} is not on PATH", f"`{fix}`"))
    return out


def unreachable_reason(reg: Mapping[str, Any]) -> str:
    text = str(reg.get("msg") or "").strip()
    text = text.removeprefix("Task failed: ").splitlines()[0] if text else "no answer"
    return text
