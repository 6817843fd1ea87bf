"""What every validation check shares: the message form, the role-variable names, type checks.

Part of the validation pass of ``playbooks/validate.yml`` (action ``sglang_lxc_validate``);
each concern has its own module beside this one (containers, serving, router, stack,
controller), all unit-tested in tests/unit/validate.
"""

from __future__ import annotations

import difflib
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.lxc_spec import (
    describe,  # re-exported: one home for how a value is shown with its type
    short_repr,
)

# Variables with these prefixes belong to a role (or to the plays, sglang_lxc_): a name no role
# declares is a typo.
ROLE_PREFIXES = (
    "proxmox_lxc_",
    "cuda_toolkit_",
    "wheelhouse_",
    "gpu_facts_",
    "gpu_drain_",
    "sglang_",
)
# Play-level variables (docs/CONVENTIONS.md, inventory/*/group_vars/all/paths.yml).
PLAY_LEVEL_VARS = {
    "sglang_lxc_prefix": "everything installed on a serving container",
    "sglang_lxc_venv": "the serving venv",
    "sglang_lxc_cuda_env_file": "systemd EnvironmentFile of the CUDA toolchain",
    "sglang_lxc_model_store": "the model store",
    "sglang_lxc_cache_dir": "JIT caches",
    "sglang_lxc_wheelhouse": "the controller's wheelhouse",
    "sglang_lxc_gpus_expected": "GPUs each serving container must see",
    "sglang_lxc_node": "the inventory host (Proxmox node) that keeps the node cache",
    "sglang_lxc_node_wheelhouse": "the node's wheel folder",
    "sglang_lxc_node_uv_cache": "the node's uv cache",
    "sglang_lxc_wheelhouse_mount": "where a container sees the node's wheel folder",
    "sglang_lxc_uv_cache": "where a container sees the node's uv cache",
}
# Roles whose inputs a serving container (group sglang_servers) carries.
SERVING_ROLES = (
    "cuda_toolkit",
    "sglang",
    "gpu_facts",
    "gpu_drain",
    "sglang_serve",
    "sglang_router",
)
NODE_ROLES = ("proxmox_lxc",)

_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "path": "a path (a string)",
    "list": "a list",
    "dict": "a mapping",
}


UNSET = object()  # "no value to show" in a problem line


def problem(host: str, var: str, value: Any, what: str, fix: str) -> str:
    """One line: host, variable, value, what is wrong, and the fix."""
    shown = "" if value is UNSET else f" = {short_repr(value)}"
    return f"{host}: {var}{shown}: {what}. Fix: {fix}"


def did_you_mean(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else ""


# ------------------------------------------------------------------------------ generic checks


def unknown_variable_problems(host: str, names: Sequence[str], declared: set[str]) -> list[str]:
    out = []
    for name in sorted(names):
        if not name.startswith(ROLE_PREFIXES) or name in declared:
            continue
        hint = did_you_mean(name, sorted(declared))
        fix = (
            f"rename it ({hint})" if hint else "remove it, or check the role's README for the name"
        )
        out.append(problem(host, name, UNSET, "no role declares this variable", fix))
    return out


def unknown_variables_by_host(
    names_by_host: Mapping[str, Sequence[str]], declared: set[str]
) -> list[str]:
    """Unknown variables, one line per variable with every host it is set on (extra vars: all)."""
    hosts_of: dict[str, list[str]] = {}
    for host, names in names_by_host.items():
        for name in names:
            if name.startswith(ROLE_PREFIXES) and name not in declared:
                hosts_of.setdefault(name, []).append(host)
    out = []
    for name, hosts in sorted(hosts_of.items()):
        out += unknown_variable_problems(", ".join(sorted(hosts)), [name], declared)
    return out


def _type_ok(kind: str, value: Any) -> bool:
    if kind in ("raw", None):
        return True
    if kind == "int":
        if isinstance(value, bool):
            return False
        return isinstance(value, int) or (
            isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()) is not None)
    if kind == "float":
        if isinstance(value, bool):
            return False
        if isinstance(value, (int, float)):
            return True
        try:
            float(value)
            return True
        except (TypeError, ValueError):
            return False
    if kind == "bool":
        return isinstance(value, bool) or (
            isinstance(value, (str, int))
            and str(value).lower() in ("yes", "no", "true", "false", "1", "0", "on", "off")
        )
    if kind in ("str", "path"):
        return isinstance(value, (str, int, float)) and not isinstance(value, bool)
    if kind == "list":
        return isinstance(value, Sequence) and not isinstance(value, str)
    if kind == "dict":
        return isinstance(value, Mapping)
    return True


def spec_problems(host: str, var: str, value: Any, spec: Mapping[str, Any]) -> list[str]:
    """Type, choices and unknown nested keys of one value against its argument_specs option."""
    kind = spec.get("type", "str")
    if value is None and not spec.get("required"):
        return []
    if not _type_ok(kind, value):
        unit = _unit(spec)
        return [
            problem(
                host,
                var,
                value,
                f"must be {_TYPE_WORDS.get(kind, kind)}{unit}, got {describe(value)}",
                f"write {var} as {_TYPE_WORDS.get(kind, kind)}{unit} "
                f"({str(spec.get('description', '')).strip()})",
            )
        ]
    out: list[str] = []
    choices = spec.get("choices")
    if choices and value not in choices and str(value) not in [str(c) for c in choices]:
        hint = did_you_mean(str(value), [str(c) for c in choices])
        out.append(
            problem(
                host,
                var,
                value,
                f"is not one of {', '.join(map(str, choices))}",
                f"pick one of them{' (' + hint + ')' if hint else ''}",
            )
        )
    options = spec.get("options")
    if options and isinstance(value, list) and spec.get("elements", "dict") == "dict":
        for index, item in enumerate(value):
            label = item.get("name", index) if isinstance(item, Mapping) else index
            out += nested_problems(host, f"{var}[{label}]", item, options)
    elif options and kind == "dict":
        out += nested_problems(host, var, value, options)
    return out


def _unit(spec: Mapping[str, Any]) -> str:
    text = str(spec.get("description", ""))
    for unit in ("MiB", "GiB", "seconds"):
        if re.search(rf"\b(in|of)\s+{unit}\b", text) or re.search(rf"^{unit}\b", text):
            return f" number of {unit}"
    return ""


def nested_problems(host: str, where: str, item: Any, options: Mapping[str, Any]) -> list[str]:
    if not isinstance(item, Mapping):
        return [
            problem(
                host,
                where,
                item,
                f"must be a mapping with keys {', '.join(options)}, got {describe(item)}",
                "write each entry as a mapping (key: value lines)",
            )
        ]
    out = []
    for key in item:
        if key not in options:
            hint = did_you_mean(str(key), list(options))
            out.append(
                problem(
                    host,
                    f"{where}.{key}",
                    item[key],
                    "unknown key",
                    f"rename it ({hint})" if hint else f"use one of {', '.join(options)}",
                )
            )
    for key, option in options.items():
        if key in item:
            out += spec_problems(host, f"{where}.{key}", item[key], option or {})
        elif (option or {}).get("required"):
            out.append(problem(host, f"{where}.{key}", UNSET, "is required", f"add {key}"))
    return out


def truthy(value: Any) -> bool:
    """A boolean as YAML or `-e name=yes` gives it."""
    if isinstance(value, str):
        return value.strip().lower() in ("yes", "true", "1", "on")
    return bool(value)


def int_or_none(value: Any) -> int | None:
    """An integer, or a string of digits as `-e name=8` passes it; otherwise None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        return int(value)
    return None


def is_runtime_undefined(error: BaseException) -> bool:
    """A value that needs something only the run defines (facts, registered results)."""
    text = str(error)
    return "Undefined" in type(error).__name__ or " is undefined" in text or "undefined" in (
        text.splitlines()[0].lower() if text else ""
    )


def template_error_problem(host: str, var: str, error: BaseException) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return problem(
        host, var, UNSET, f"cannot be evaluated: {first}", f"correct {var} in the inventory"
    )
