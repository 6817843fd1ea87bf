"""The toolchain release, the stack's lock and the kernel build's caps, as cuda_toolkit and
sglang check them for themselves.

Part of the validation pass (action ``sglang_lxc_validate``); unit-tested in tests/unit/validate.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_common import (
    did_you_mean,
    problem,
    truthy,
)


def stack_problems(host: str, values: Mapping[str, Any]) -> list[str]:
    """Toolchain release, stack lock and build caps, as cuda_toolkit and sglang check them."""
    out = []
    version = values.get("cuda_toolkit_version")
    releases = values.get("cuda_toolkit_releases")
    if (
        version is not None
        and values.get("cuda_toolkit_source", "wheels") == "wheels"
        and isinstance(releases, Mapping)
    ) and str(version) not in {str(k) for k in releases}:
        hint = did_you_mean(str(version), [str(k) for k in releases])
        out.append(
            problem(
                host,
                "cuda_toolkit_version",
                version,
                f"no pinned release (known: {', '.join(map(str, releases))})",
                f"pick a known release{' (' + hint + ')' if hint else ''}",
            )
        )
    sversion = values.get("sglang_version")
    lock_dir = values.get("sglang_lock_dir")
    if sversion is not None and isinstance(lock_dir, str) and os.path.isdir(lock_dir):
        lock = Path(lock_dir) / f"sglang-{sversion}.txt"
        if not lock.is_file():
            locked = sorted(
                p.stem.removeprefix("sglang-")
                for p in Path(lock_dir).glob("sglang-*.txt")
                if not p.stem.endswith("-build")
            )
            out.append(
                problem(
                    host,
                    "sglang_version",
                    sversion,
                    f"has no lock ({lock} does not exist; locked: {', '.join(locked) or 'none'})",
                    "pick a locked version, or run "
                    f"`python scripts/lock_stack.py --sglang {sversion}`",
                )
            )
    if truthy(values.get("sglang_kernel_from_source", False)):
        for name in ("sglang_kernel_build_per_thread_gb", "sglang_kernel_build_reserve_gb"):
            value = values.get(name)
            if value is not None and (
                isinstance(value, bool) or not isinstance(value, (int, float)) or value < 0
            ):
                out.append(
                    problem(
                        host,
                        name,
                        value,
                        "must be a number of GB, 0 or more",
                        f"set {name} to a number such as 4",
                    )
                )
        slot = values.get("sglang_kernel_build_slot")
        if slot is not None and not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", str(slot)):
            out.append(
                problem(
                    host,
                    "sglang_kernel_build_slot",
                    slot,
                    "must be a plain name",
                    "use letters, digits, '.', '_' or '-', e.g. the node's name",
                )
            )
    return out
