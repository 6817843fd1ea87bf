"""The serving container's own inputs: the instances as sglang_serve will expand them, the
play-level paths and GPU count, and the drain settings.

The instances' checks are the sglang_serve role's own (plugin_utils/serve_instances.py), so the
role and this pass refuse the same things; among them the CPU serving mode's
(sglang_serve_device: cpu): GPU indexes on a CPU instance, a GPU-only attention backend on one,
and the libcuda stub on a GPU instance's LD_LIBRARY_PATH or LD_PRELOAD (it would hide the
driver).

Part of the validation pass (action ``sglang_lxc_validate``); unit-tested in tests/unit/validate.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import serve_instances as serve
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_common import (
    PLAY_LEVEL_VARS,
    UNSET,
    describe,
    int_or_none,
    problem,
    truthy,
)


def serve_problems(
    host: str, values: Mapping[str, Any], gpu_count: int | None
) -> tuple[list[str], list]:
    """Expand the instances as the sglang_serve role will; a ServeConfigError becomes a problem."""
    if not truthy(values.get("sglang_serve_enabled", True)):
        return [], []
    count = values.get("sglang_serve_gpu_count")
    if count is None:
        count = gpu_count
    if count is None and values.get("sglang_serve_device") == "cpu":
        count = 0  # CPU instances take no GPUs: their checks need no GPU count
    if count is None:
        return [], []
    try:  # the settings as the role reads them (tasks/validate.yml)
        instances = serve.sglang_serve_instances(
            serve.role_settings(values), count, bool(values.get("sglang_serve_api_key"))
        )
    except serve.ServeConfigError as exc:
        text = str(exc)
        var = (
            text.split(" ", 1)[0].rstrip(":")
            if text.startswith("sglang_serve_")
            else "sglang_serve"
        )
        return [f"{host}: {text}" if text.startswith(var) else f"{host}: {var}: {text}"], []
    return [], instances


# systemd parses ExecStart itself: it substitutes $VAR and %-specifiers and splits on quotes,
# Container paths, each of which must be absolute.
CONTAINER_PATHS = ("sglang_lxc_prefix", "sglang_lxc_venv", "sglang_lxc_cuda_env_file",
                   "sglang_lxc_model_store", "sglang_lxc_cache_dir", "sglang_lxc_wheelhouse_mount",
                   "sglang_lxc_uv_cache")


def required_play_vars(passed: Mapping[str, Mapping[str, Any]]) -> set[str]:
    """The sglang_lxc_* names the plays pass to their roles with no default of their own (what
    play_role_vars reads): each has one home, the inventory, so a serving container needs it."""
    names: set[str] = set()
    for params in passed.values():
        for value in params.values():
            text = str(value)
            for name in set(re.findall(r"\bsglang_lxc_\w+", text)):
                if not re.search(rf"\b{name}\s*\|\s*default\(", text):
                    names.add(name)
    return names


def missing_play_vars(host: str, values: Mapping[str, Any], required: set[str]) -> list[str]:
    """The play-level variables a serving container's inventory leaves unset."""
    return [
        problem(host, name, UNSET,
                f"is not set ({PLAY_LEVEL_VARS.get(name, 'a play-level variable')}); the plays "
                "pass it to the roles", f"set {name} in the inventory's group_vars/all/paths.yml,"
                " as inventory/example does")
        for name in sorted(required) if name not in values
    ]


def play_level_problems(host: str, values: Mapping[str, Any]) -> list[str]:
    """The play-level sglang_lxc_* paths (absolute) and the expected GPU count (an integer)."""
    out = []
    expected = values.get("sglang_lxc_gpus_expected")
    number = int_or_none(expected)
    if expected is not None and (number is None or number < 0):
        out.append(problem(host, "sglang_lxc_gpus_expected", expected,
                           "must be an integer number of GPUs (0 or more), "
                           f"got {describe(expected)}",
                           "write the count each serving container must see, e.g. 8 (0: no GPU)"))
    for name in CONTAINER_PATHS:
        value = values.get(name)
        if value is not None and not (isinstance(value, str) and value.startswith("/")):
            out.append(problem(host, name, value, "must be an absolute path on the container",
                               f"write {name} as a path starting with /"))
    return out


def drain_problems(host: str, values: Mapping[str, Any]) -> list[str]:
    out = []
    grace = int_or_none(values.get("gpu_drain_grace_seconds"))
    if grace is not None and grace <= 0:
        out.append(
            problem(
                host,
                "gpu_drain_grace_seconds",
                grace,
                "must be greater than 0 (time to checkpoint)",
                "give workloads time after SIGTERM, e.g. 300",
            )
        )
    units = values.get("gpu_drain_units") or []
    if isinstance(units, list):
        for unit in units:
            if not re.fullmatch(r"[A-Za-z0-9:_.@\\-]+", str(unit)):
                out.append(
                    problem(
                        host,
                        "gpu_drain_units",
                        unit,
                        "is not an exact systemd unit name",
                        "name units exactly, or use gpu_drain_gpu_holders: true",
                    )
                )
    if (
        truthy(values.get("gpu_drain_force", False))
        and not units
        and not truthy(values.get("gpu_drain_gpu_holders", False))
    ):
        out.append(
            problem(
                host,
                "gpu_drain_force",
                True,
                "needs a selector",
                "name the units in gpu_drain_units or set gpu_drain_gpu_holders: true",
            )
        )
    return out
