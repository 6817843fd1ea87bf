"""Action plugin ``sglang_lxc_validate``: one validation pass over every input of a run.

``playbooks/validate.yml`` calls it once (run_once) after reading each Proxmox node's state
(cores, memory, GPUs, bridges, templates, containers through ``pct``). It never changes anything
and never fails by itself: it returns ``problems``, one line each, that start with the host, the
variable and its value and end with the fix. The play then prints them with one
``ansible.builtin.fail``.

What it checks:

- unknown role-prefixed variables (inventory and extra vars), with "did you mean";
- every role variable set on a host against its role's ``argument_specs`` (type, choices),
  including unknown keys inside nested entries (container specs, mounts, instances);
- the container specs of every node (``lxc_container_errors``) and against the live node:
  cores, memory, GPU indexes, the bridge's subnet, the OS template, and vmids, hostnames and
  addresses already used by other containers there;
- the serving instance expansion (``sglang_serve_instances``), the router, the drain settings;
- the controller: the SSH public key to install, the wheelhouse's free space, tools on PATH.

The checks are plain functions (unit-tested in tests/unit/validate); ``ActionModule`` only
gathers the values.
"""

from __future__ import annotations

import copy
import difflib
import functools
import importlib.util
import ipaddress
import os
import re
import shutil
import sys
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

try:  # pragma: no cover - inside Ansible
    from ansible.plugins.action import ActionBase
except ImportError:  # pragma: no cover - unit tests import the functions only
    ActionBase = object  # type: ignore[misc,assignment]

REPO = Path(__file__).resolve().parents[2]
ROLES_DIR = REPO / "roles"
PLAYBOOKS_DIR = REPO / "playbooks"

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
RFC1123_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")
# Free space the wheelhouse needs for the SGLang stack (about 4.1 GB of wheels) and the toolchain.
WHEELHOUSE_MIN_FREE_GIB = 8
# Tools the controller itself runs.
CONTROLLER_TOOLS = {"ssh": "apt-get install openssh-client"}

_TYPE_WORDS = {
    "int": "an integer",
    "float": "a number",
    "bool": "true or false",
    "str": "a string",
    "path": "a path (a string)",
    "list": "a list",
    "dict": "a mapping",
}


def _load_by_path(name: str, path: Path):
    if name in sys.modules:
        return sys.modules[name]
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


_lxc = _load_by_path("sglang_lxc_filter_proxmox_lxc", REPO / "plugins/filter/proxmox_lxc.py")
_serve = _load_by_path("sglang_lxc_filter_sglang_serve", REPO / "plugins/filter/sglang_serve.py")


# ------------------------------------------------------------------------------ messages


# one home for how a value is shown with its type: the proxmox_lxc filter (loaded above)
describe = _lxc.describe
_short = _lxc.short_repr


def problem(host: str, var: str, value: Any, what: str, fix: str) -> str:
    """One line: host, variable, value, what is wrong, and the fix."""
    shown = "" if value is _UNSET else f" = {_short(value)}"
    return f"{host}: {var}{shown}: {what}. Fix: {fix}"


_UNSET = object()


def did_you_mean(name: str, known: Sequence[str]) -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    return f"did you mean {close[0]}?" if close else ""


# ------------------------------------------------------------------------------ declarations


_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _read_yaml_cached(path: Path) -> Any:
    try:
        return yaml.load(path.read_text(), Loader=_LOADER) or {}  # CSafeLoader: safe
    except (OSError, yaml.YAMLError):
        return {}


def _read_yaml(path: Path) -> Any:
    """A role or play file, parsed once per run (callers must not change the result)."""
    return copy.deepcopy(_read_yaml_cached(path))


def role_specs(roles_dir: Path = ROLES_DIR) -> dict[str, dict[str, dict]]:
    """``{role: {variable: option spec}}`` from every entry point of each role's argument_specs."""
    out: dict[str, dict[str, dict]] = {}
    for role in sorted(p.name for p in roles_dir.iterdir() if p.is_dir()):
        specs = _read_yaml(roles_dir / role / "meta" / "argument_specs.yml")
        options: dict[str, dict] = {}
        for entry in (specs.get("argument_specs") or {}).values():
            for name, option in ((entry or {}).get("options") or {}).items():
                options.setdefault(name, option or {})
        out[role] = options
    return out


def role_defaults(roles_dir: Path = ROLES_DIR) -> dict[str, dict[str, Any]]:
    return {
        p.name: _read_yaml(p / "defaults" / "main.yml")
        for p in sorted(roles_dir.iterdir())
        if p.is_dir()
    }


def role_vars(roles_dir: Path = ROLES_DIR) -> dict[str, dict[str, Any]]:
    return {
        p.name: _read_yaml(p / "vars" / "main.yml")
        for p in sorted(roles_dir.iterdir())
        if p.is_dir() and (p / "vars" / "main.yml").is_file()
    }


_FACT_NAME = re.compile(r"^\s*(?:register:\s*|)([a-z][a-z0-9_]*)\s*:", re.M)


def role_public_facts(roles_dir: Path = ROLES_DIR) -> set[str]:
    """Public names a role sets at run time (set_fact keys, register names without ``__``)."""
    names: set[str] = set()
    for path in roles_dir.glob("*/tasks/*.yml"):
        tasks = _read_yaml(path)
        for task in tasks if isinstance(tasks, list) else []:
            if not isinstance(task, Mapping):
                continue
            registered = task.get("register")
            if isinstance(registered, str):
                names.add(registered)
            facts = task.get("ansible.builtin.set_fact") or task.get("set_fact")
            if isinstance(facts, Mapping):
                names.update(k for k in facts if k != "cacheable")
    return {n for n in names if not n.startswith("_")}


def play_role_vars(playbooks_dir: Path = PLAYBOOKS_DIR) -> dict[str, dict[str, Any]]:
    """Values the plays pass to each role (``roles: - role: x, vars: ...`` and import_role)."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(playbooks_dir.glob("*.yml")):
        plays = _read_yaml(path)
        for play in plays if isinstance(plays, list) else []:
            if not isinstance(play, Mapping):
                continue
            for entry in play.get("roles") or []:
                if isinstance(entry, Mapping) and entry.get("role"):
                    params = dict(entry.get("vars") or {})
                    params.update({k: v for k, v in entry.items() if k not in ("role", "vars")})
                    out.setdefault(entry["role"], {}).update(params)
            for task in (play.get("tasks") or []) + (play.get("pre_tasks") or []):
                for key in ("ansible.builtin.import_role", "ansible.builtin.include_role"):
                    spec = task.get(key) if isinstance(task, Mapping) else None
                    if isinstance(spec, Mapping) and spec.get("name"):
                        out.setdefault(spec["name"], {}).update(task.get("vars") or {})
    return out


def declared_names(roles_dir: Path = ROLES_DIR) -> set[str]:
    names: set[str] = set(PLAY_LEVEL_VARS)
    for options in role_specs(roles_dir).values():
        names.update(options)
    for defaults in role_defaults(roles_dir).values():
        names.update(defaults)
    names.update(role_public_facts(roles_dir))
    return names


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
        out.append(problem(host, name, _UNSET, "no role declares this variable", fix))
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
        return (
            (isinstance(value, int)
            and not isinstance(value, bool))
            or (isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()) is not None)
        )
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
            out += _nested_problems(host, f"{var}[{label}]", item, options)
    elif options and kind == "dict":
        out += _nested_problems(host, var, value, options)
    return out


def _unit(spec: Mapping[str, Any]) -> str:
    text = str(spec.get("description", ""))
    for unit in ("MiB", "GiB", "seconds"):
        if re.search(rf"\b(in|of)\s+{unit}\b", text) or re.search(rf"^{unit}\b", text):
            return f" number of {unit}"
    return ""


def _nested_problems(host: str, where: str, item: Any, options: Mapping[str, Any]) -> list[str]:
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
            out.append(problem(host, f"{where}.{key}", _UNSET, "is required", f"add {key}"))
    return out


# ------------------------------------------------------------------------------ node state


def parse_node_state(text: str) -> dict[str, Any]:
    """Parse the output of playbooks/files/node_state.sh into cores, memory, GPUs, containers."""
    sections: dict[str, list[str]] = {}
    current = None
    for line in (text or "").splitlines():
        if line.startswith("## "):
            current = line[3:].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    state: dict[str, Any] = {
        "cores": None,
        "memory_mib": None,
        "gpus": [],
        "bridges": {},
        "templates": [],
        "containers": {},
    }
    cores = "".join(sections.get("nproc", [])).strip()
    state["cores"] = int(cores) if cores.isdigit() else None
    for line in sections.get("meminfo", []):
        m = re.match(r"MemTotal:\s+(\d+)\s*kB", line)
        if m:
            state["memory_mib"] = int(m.group(1)) // 1024
    state["gpus"] = sorted(
        int(m.group(1))
        for line in sections.get("gpus", [])
        if (m := re.fullmatch(r"nvidia(\d+)", line.strip()))
    )
    for line in sections.get("addresses", []):
        m = re.match(r"\d+:\s+(\S+)\s+inet\s+(\S+)", line)
        if m:
            state["bridges"].setdefault(m.group(1), []).append(m.group(2))
    state["templates"] = [t.strip() for t in sections.get("templates", []) if t.strip()]
    for line in sections.get("pct list", [])[1:]:
        parts = line.split()
        if parts and parts[0].isdigit():
            state["containers"][int(parts[0])] = {
                "name": parts[-1] if len(parts) > 2 else "",
                "ip": None,
            }
    for title, lines in sections.items():
        m = re.fullmatch(r"config (\d+)", title)
        if not m:
            continue
        conf = _lxc.pve_conf_parse("\n".join(lines))["options"]
        entry = state["containers"].setdefault(int(m.group(1)), {"name": "", "ip": None})
        entry["name"] = conf.get("hostname", entry["name"])
        net = _lxc._props(conf.get("net0", ""))
        ip = net.get("ip", "")
        entry["ip"] = ip.split("/")[0] if ip and ip != "dhcp" else None
    return state


# ------------------------------------------------------------------------------ containers


_LXC_TYPED = ("vmid", "memory", "cores", "swap", "rootfs_size", "mounts", "gpus")


def container_problems(
    node: str,
    containers: Any,
    defaults: Any,
    state: Mapping[str, Any] | None,
    memory_floor: Any = 512,
    recreate: Sequence[str] = (),
    options: Mapping[str, Any] | None = None,
) -> tuple[list[str], list[dict]]:
    """Problems with a node's container specs, alone and against the node's live state."""
    var = "proxmox_lxc_containers"
    if not isinstance(containers, Sequence) or isinstance(containers, str):
        return [
            problem(
                node,
                var,
                containers,
                f"must be a list of container specs, got {describe(containers)}",
                "write one '- name: ...' entry per container",
            )
        ], []
    if not isinstance(defaults, Mapping):
        return [
            problem(
                node,
                "proxmox_lxc_container_defaults",
                defaults,
                f"must be a mapping, got {describe(defaults)}",
                "write it as key: value lines",
            )
        ], []
    out: list[str] = []
    if options:
        # lxc_container_errors reports these with their units; the spec check skips their type
        options = {
            k: ({**(v or {}), "type": "raw"} if k in _LXC_TYPED else v) for k, v in options.items()
        }
        out += spec_problems(
            node, var, containers, {"type": "list", "elements": "dict", "options": options}
        )
        out += _nested_problems(node, "proxmox_lxc_container_defaults", defaults, options)
        # name and vmid are required in each entry, never in the defaults
        out = [
            p
            for p in out
            if not p.startswith(f"{node}: proxmox_lxc_container_defaults.name:")
            and not p.startswith(f"{node}: proxmox_lxc_container_defaults.vmid:")
        ]
    merged = [
        ct
        for ct in _lxc.lxc_with_defaults(
            [c for c in containers if isinstance(c, Mapping)], defaults
        )
    ]
    floor = memory_floor if isinstance(memory_floor, int) else 512
    out += [f"{node}: {e}" for e in _lxc.lxc_container_errors(merged, node, floor)]
    if state:
        out += _live_problems(node, merged, state, recreate)
    return out, merged


def _live_problems(node: str, merged: list[dict], state: Mapping[str, Any], recreate) -> list[str]:
    out: list[str] = []
    live = state.get("containers") or {}
    cores, memory, gpus = state.get("cores"), state.get("memory_mib"), state.get("gpus") or []
    for ct in merged:
        name = ct.get("name")
        where = f"proxmox_lxc_containers[{name}]"
        vmid = ct.get("vmid")
        hostname = ct.get("hostname")
        current = live.get(vmid) if isinstance(vmid, int) else None
        if current and current.get("name") and current["name"] != hostname and name not in recreate:
            out.append(
                problem(
                    node,
                    f"{where}.vmid",
                    vmid,
                    f'CT {vmid} on {node} is already "{current["name"]}", not {hostname}',
                    f"pick a vmid that `pct list` on {node} does not show, or list {name} in "
                    "proxmox_lxc_recreate to replace that container",
                )
            )
        for other_id, other in live.items():
            if other_id == vmid:
                continue
            if hostname and other.get("name") == hostname:
                out.append(
                    problem(
                        node,
                        f"{where}.hostname",
                        hostname,
                        f"CT {other_id} on {node} already has this hostname",
                        "choose another hostname (or give this spec vmid "
                        f"{other_id} if it describes that container)",
                    )
                )
            ip = str(ct.get("ip", "")).split("/")[0]
            if ip and ip != "dhcp" and other.get("ip") == ip:
                out.append(
                    problem(
                        node,
                        f"{where}.ip",
                        ct.get("ip"),
                        f"{ip} is already used by CT {other_id} ({other.get('name')}) on {node}",
                        "choose a free address in the bridge's subnet",
                    )
                )
        c = ct.get("cores")
        if isinstance(c, int) and not isinstance(c, bool) and cores and c > cores:
            out.append(
                problem(
                    node,
                    f"{where}.cores",
                    c,
                    f"{node} has only {cores} cores",
                    f"set cores to {cores} or fewer",
                )
            )
        m = ct.get("memory")
        if isinstance(m, int) and not isinstance(m, bool) and memory and m > memory:
            out.append(
                problem(
                    node,
                    f"{where}.memory",
                    m,
                    f"{node} has only {memory} MiB of memory",
                    f"set memory to at most {memory} (MiB)",
                )
            )
        want = ct.get("gpus")
        if isinstance(want, list) and (gpus or ct.get("gpu_required")):
            missing = sorted({g for g in want if isinstance(g, int)} - set(gpus))
            if missing:
                have = ", ".join(map(str, gpus)) or "no GPU"
                out.append(
                    problem(
                        node,
                        f"{where}.gpus",
                        want,
                        f"GPU {', '.join(map(str, missing))} not on {node} (it has: {have})",
                        "list only GPU indexes the node has, or gpus: all",
                    )
                )
        if ct.get("gpu_required") and not gpus:
            out.append(
                problem(
                    node,
                    f"{where}.gpu_required",
                    True,
                    f"{node} has no NVIDIA GPU",
                    "load the NVIDIA driver on the node, or set gpu_required: false",
                )
            )
        out += _subnet_problems(node, where, ct, state.get("bridges") or {})
        template = str(ct.get("template", ""))
        exists = isinstance(vmid, int) and vmid in live
        if state.get("templates_dir") and (not exists or name in recreate):
            file = re.sub(r"^[^:]+:vztmpl/", "", template)
            if file not in state.get("templates", []):
                path = f"{state['templates_dir']}/{file}"
                out.append(
                    problem(
                        node,
                        f"{where}.template",
                        template,
                        f"{path} not found on {node}",
                        f"download it with `pveam download local {file}` "
                        "(lab: `sglang-lxc lab up`)",
                    )
                )
    return out


def _subnet_problems(node: str, where: str, ct: Mapping[str, Any], bridges: Mapping) -> list[str]:
    ip, bridge = ct.get("ip"), ct.get("bridge")
    if ip in (None, "dhcp") or ct.get("allow_ip_outside_bridge"):
        return []
    try:
        iface = ipaddress.ip_interface(str(ip))
    except ValueError:
        return []  # reported by lxc_container_errors
    nets = []
    for cidr in bridges.get(bridge, []):
        try:
            nets.append(ipaddress.ip_interface(cidr).network)
        except ValueError:
            continue
    if bridge not in bridges:
        return [
            problem(
                node,
                f"{where}.bridge",
                bridge,
                f"{node} has no bridge {bridge} with an IPv4 address",
                f"create the bridge on {node} or name one it has "
                f"({', '.join(sorted(bridges)) or 'none'})",
            )
        ]
    if not nets:
        return []
    out = []
    if not any(iface.ip in net for net in nets):
        out.append(
            problem(
                node,
                f"{where}.ip",
                ip,
                f"outside bridge {bridge}'s subnet {', '.join(map(str, nets))}",
                f"pick an address in {nets[0]}, or set allow_ip_outside_bridge: true in this "
                "container's spec if the bridge is routed elsewhere",
            )
        )
    gateway = ct.get("gateway")
    if gateway:
        try:
            gw = ipaddress.ip_address(str(gateway))
            if not any(gw in net for net in nets):
                out.append(
                    problem(
                        node,
                        f"{where}.gateway",
                        gateway,
                        f"outside bridge {bridge}'s subnet {nets[0]}",
                        f"use the gateway of {nets[0]}",
                    )
                )
        except ValueError:
            out.append(
                problem(
                    node,
                    f"{where}.gateway",
                    gateway,
                    "is not an IP address",
                    "write it as an address such as 10.0.3.1",
                )
            )
    return out


def cross_node_problems(
    nodes: Sequence[str], containers: list[dict], recreate: Sequence[str]
) -> list[str]:
    """vmids, names, addresses used twice across nodes; recreate names not in the inventory."""
    if len(nodes) < 2 and not recreate:
        return []
    errors = _lxc.lxc_container_errors(containers, "all nodes", 0, list(recreate))
    if len(nodes) < 2:  # duplicates within one node are reported with that node
        errors = [e for e in errors if e.startswith("proxmox_lxc_recreate")]
    return [
        f"{'controller' if e.startswith('proxmox_lxc_recreate') else 'all nodes'}: {e}"
        for e in errors
    ]


# ------------------------------------------------------------------------------ serving


# The settings the sglang_serve filter reads: its own list, so the two never drift.
SERVE_SETTINGS = _serve.SETTINGS


def _truthy(value: Any) -> bool:
    if isinstance(value, str):
        return value.strip().lower() in ("yes", "true", "1", "on")
    return bool(value)


def serve_problems(
    host: str, values: Mapping[str, Any], gpu_count: int | None
) -> tuple[list[str], list]:
    """Expand the instances as the sglang_serve role will; a ServeConfigError becomes a problem."""
    if not _truthy(values.get("sglang_serve_enabled", True)):
        return [], []
    settings = {key: values.get(f"sglang_serve_{key}") for key in SERVE_SETTINGS}
    count = values.get("sglang_serve_gpu_count")
    if count is None:
        count = gpu_count
    if count is None:
        return [], []
    try:
        instances = _serve.sglang_serve_instances(
            settings, count, bool(values.get("sglang_serve_api_key"))
        )
    except _serve.ServeConfigError as exc:
        text = str(exc)
        var = (
            text.split(" ", 1)[0].rstrip(":")
            if text.startswith("sglang_serve_")
            else "sglang_serve"
        )
        return [f"{host}: {text}" if text.startswith(var) else f"{host}: {var}: {text}"], []
    return [], instances


# systemd parses ExecStart itself: it substitutes $VAR and %-specifiers and splits on quotes,
# so these never reach the router literally.
SYSTEMD_UNSAFE = re.compile(r"[$%;'\"`\\\n\r]")


def router_problems(host: str, values: Mapping[str, Any], instances: list) -> list[str]:
    if not _truthy(values.get("sglang_router_enabled", False)):
        return []
    out = []
    for var in ("sglang_router_extra_args", "sglang_router_launch_command"):
        for arg in values.get(var) or []:
            if SYSTEMD_UNSAFE.search(str(arg)):
                out.append(problem(
                    host, var, arg,
                    "holds a character systemd's ExecStart would substitute or split "
                    "($, %, ;, quotes, backslash, line break)",
                    "pass plain arguments (one list entry each, without those characters)",
                ))
    for var in ("sglang_router_host", "sglang_router_policy"):
        if SYSTEMD_UNSAFE.search(str(values.get(var, ""))) or " " in str(values.get(var, "")):
            out.append(problem(host, var, values.get(var), "is not a plain word",
                               "use a plain value (an address, a policy name)"))
    rhost = values.get("sglang_router_host", "127.0.0.1")
    if rhost not in ("127.0.0.1", "::1", "localhost") and not _truthy(
        values.get("sglang_router_allow_insecure_bind", False)
    ):
        out.append(
            problem(
                host,
                "sglang_router_host",
                rhost,
                "is not a loopback address and the router has no key",
                "bind 127.0.0.1, or set sglang_router_allow_insecure_bind: true",
            )
        )
    port = values.get("sglang_router_port")
    try:
        port = int(port)
    except (TypeError, ValueError):
        return out  # the type check reports it
    if not 1 <= port <= 65535:
        out.append(
            problem(
                host,
                "sglang_router_port",
                port,
                "outside 1-65535",
                "pick a free port such as 30080",
            )
        )
    for instance in instances:
        if instance["port"] == port:
            out.append(
                problem(
                    host,
                    "sglang_router_port",
                    port,
                    f"instance {instance['name']} uses it too",
                    "give the router a port no instance uses",
                )
            )
    return out


def _int_or_none(value: Any) -> int | None:
    """An integer, or a string of digits as `-e name=8` passes it; otherwise None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value
    if isinstance(value, str) and re.fullmatch(r"-?[0-9]+", value.strip()):
        return int(value)
    return None


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
        problem(host, name, _UNSET,
                f"is not set ({PLAY_LEVEL_VARS.get(name, 'a play-level variable')}); the plays "
                "pass it to the roles", f"set {name} in the inventory's group_vars/all/paths.yml,"
                " as inventory/example does")
        for name in sorted(required) if name not in values
    ]


def play_level_problems(host: str, values: Mapping[str, Any]) -> list[str]:
    """The play-level sglang_lxc_* paths (absolute) and the expected GPU count (an integer)."""
    out = []
    expected = values.get("sglang_lxc_gpus_expected")
    number = _int_or_none(expected)
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
    grace = _int_or_none(values.get("gpu_drain_grace_seconds"))
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
        _truthy(values.get("gpu_drain_force", False))
        and not units
        and not _truthy(values.get("gpu_drain_gpu_holders", False))
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


def stack_problems(host: str, values: Mapping[str, Any], roles_dir: Path = ROLES_DIR) -> list[str]:
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
    if _truthy(values.get("sglang_kernel_from_source", False)):
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


# ------------------------------------------------------------------------------ controller


def controller_problems(
    key_errors: Mapping[str, str],
    wheelhouse: str | None,
    min_free_gib: float = WHEELHOUSE_MIN_FREE_GIB,
    tools: Mapping[str, str] = CONTROLLER_TOOLS,
    need_ssh: bool = True,
) -> list[str]:
    out = []
    for host, error in sorted(key_errors.items()):
        out.append(
            problem(
                host,
                "proxmox_lxc_ssh_public_key",
                _UNSET,
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
            out.append(problem("controller", "PATH", _UNSET, f"{tool} is not on PATH", f"`{fix}`"))
    return out


def is_runtime_undefined(error: BaseException) -> bool:
    """A value that needs something only the run defines (facts, registered results)."""
    text = str(error)
    return "Undefined" in type(error).__name__ or " is undefined" in text or "undefined" in (
        text.splitlines()[0].lower() if text else ""
    )


def _unreachable_reason(reg: Mapping[str, Any]) -> str:
    text = str(reg.get("msg") or "").strip()
    text = text.removeprefix("Task failed: ").splitlines()[0] if text else "no answer"
    return text


def template_error_problem(host: str, var: str, error: BaseException) -> str:
    first = str(error).strip().splitlines()[0] if str(error).strip() else type(error).__name__
    return problem(
        host, var, _UNSET, f"cannot be evaluated: {first}", f"correct {var} in the inventory"
    )


# ------------------------------------------------------------------------------ the action


def _with_role_path(value: Any, path: Path) -> Any:
    """``role_path`` as Ansible sets it inside the role (the env here spans several roles)."""
    if isinstance(value, str):
        return value.replace("{{ role_path }}", str(path))
    if isinstance(value, Mapping):
        return {k: _with_role_path(v, path) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_role_path(v, path) for v in value]
    return value


def _trusted(value: Any) -> Any:  # pragma: no cover - needs ansible-core
    """Role files read here are the project's own: mark their strings as templates (2.19)."""
    from ansible.template import trust_as_template

    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, Mapping):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


class ActionModule(ActionBase):
    """Collects every problem of the run's inputs; changes nothing."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):  # pragma: no cover - exercised through the lab
        started = time.monotonic()
        result = super().run(tmp, task_vars)
        result["changed"] = False
        args = self._task.args
        hostvars = task_vars["hostvars"]
        node_states: Mapping[str, Any] = args.get("node_states") or {}
        groups = task_vars.get("groups", {})
        nodes = list(groups.get("proxmox_nodes", []))
        servers = list(groups.get("sglang_servers", []))
        specs = role_specs()
        defaults = role_defaults()
        rvars = role_vars()
        pvars = play_role_vars()
        required = required_play_vars(pvars)
        declared = declared_names()
        problems: list[str] = []
        key_errors: dict[str, str] = {}
        containers_by_name: dict[str, dict] = {}
        ssh_hosts = False

        names_by_host: dict[str, list[str]] = {}
        for host in sorted(set(groups.get("all", [])) | set(nodes)):
            raw = hostvars.raw_get(host)
            names_by_host[host] = [n for n in raw if isinstance(n, str)]
            if raw.get("ansible_connection", "ssh") in ("ssh", "paramiko", "smart"):
                ssh_hosts = ssh_hosts or host != "localhost"
        problems += unknown_variables_by_host(names_by_host, declared)

        for node in nodes:
            values, errors = self._values(hostvars, node, ("proxmox_lxc",), defaults, rvars, pvars)
            for var, error in errors.items():
                if var == "proxmox_lxc_ssh_public_key":
                    key_errors[node] = str(error).strip().splitlines()[0]
                else:
                    problems.append(template_error_problem(node, var, error))
            problems += self._typed(
                node,
                values,
                hostvars.raw_get(node),
                specs["proxmox_lxc"],
                skip=("proxmox_lxc_containers", "proxmox_lxc_container_defaults"),
            )
            reg = node_states.get(node) or {}
            state = None
            if reg.get("unreachable"):
                problems.append(
                    problem(
                        node,
                        "ansible_host",
                        hostvars.raw_get(node).get("ansible_host", node),
                        f"unreachable: {_unreachable_reason(reg)}",
                        "check the address, the SSH key and that the node is up",
                    )
                )
            elif reg.get("rc", 0) != 0 or reg.get("failed"):
                problems.append(
                    problem(
                        node,
                        "proxmox_lxc_pct",
                        values.get("proxmox_lxc_pct"),
                        "reading the node's containers failed: "
                        + (reg.get("stderr") or reg.get("msg") or "").strip()[:200],
                        f"check that {values.get('proxmox_lxc_pct')} runs on {node}",
                    )
                )
            elif reg:
                state = parse_node_state(reg.get("stdout", ""))
                state["templates_dir"] = values.get("proxmox_lxc_template_dir")
            recreate = values.get("proxmox_lxc_recreate") or []
            found, merged = container_problems(
                node,
                values.get("proxmox_lxc_containers", []),
                values.get("proxmox_lxc_container_defaults", {}),
                state,
                values.get("proxmox_lxc_memory_floor", 512),
                recreate if isinstance(recreate, list) else [],
                specs["proxmox_lxc"]["proxmox_lxc_containers"].get("options"),
            )
            problems += found
            for ct in merged:
                gpus = ct.get("gpus")
                count = None
                if gpus == "all" and state is not None:
                    count = len(state["gpus"])
                elif isinstance(gpus, list):
                    count = len(gpus)
                containers_by_name[str(ct.get("name"))] = {
                    "node": node,
                    "gpu_count": count,
                    "spec": ct,
                }
                for var in (
                    (ct.get("host_vars") or {}) if isinstance(ct.get("host_vars"), Mapping) else {}
                ):
                    problems += unknown_variable_problems(
                        f"{ct.get('name')} (host_vars on {node})", [var], declared
                    )

        if not nodes:
            problems.append(problem(
                "inventory", "proxmox_nodes", _UNSET, "the group is empty",
                "add the Proxmox host(s) under the group proxmox_nodes",
            ))
        all_containers = [c["spec"] for c in containers_by_name.values()]
        recreate_all = task_vars.get("proxmox_lxc_recreate") or []
        problems += cross_node_problems(
            nodes, all_containers, recreate_all if isinstance(recreate_all, list) else []
        )
        if not servers and not all_containers:
            problems.append(
                problem(
                    "inventory",
                    "sglang_servers",
                    _UNSET,
                    "no container in group sglang_servers and none in proxmox_lxc_containers",
                    "add the serving containers",
                )
            )

        for host in servers:
            values, errors = self._values(hostvars, host, SERVING_ROLES, defaults, rvars, pvars)
            raw = hostvars.raw_get(host)
            for var, error in errors.items():
                if var in raw:
                    problems.append(template_error_problem(host, var, error))
            for role in SERVING_ROLES:
                problems += self._typed(
                    host, values, raw, specs.get(role, {}), skip=("sglang_serve_instances",)
                )
            expected = values.get("sglang_lxc_gpus_expected")
            ct = containers_by_name.get(host)
            gpu_count = (
                ct["gpu_count"]
                if ct and ct["gpu_count"] is not None
                else _int_or_none(expected)
            )
            found, instances = serve_problems(host, values, gpu_count)
            problems += found
            problems += router_problems(host, values, instances)
            problems += drain_problems(host, values)
            problems += play_level_problems(host, values)
            problems += missing_play_vars(host, values, required)
            problems += stack_problems(host, values)

        wheelhouse = None
        if servers:
            wv, _ = self._values(hostvars, servers[0], (), defaults, rvars, pvars)
            wheelhouse = wv.get("sglang_lxc_wheelhouse")
        problems += controller_problems(
            key_errors, wheelhouse if isinstance(wheelhouse, str) else None, need_ssh=ssh_hosts
        )
        result["problems"] = problems
        result["elapsed_s"] = round(time.monotonic() - started, 2)
        result["checked"] = {"nodes": nodes, "servers": servers}
        if problems:  # the run stops here, before any change (one task, no separate fail)
            result["failed"] = True
            result["msg"] = (f"{chr(10).join(problems)}\n({len(problems)} problem(s); "
                             "nothing was changed)")
        return result

    def _values(self, hostvars, host, roles, defaults, rvars, pvars):  # pragma: no cover
        """Each variable of ``roles`` as the role will see it on ``host``, templated."""
        raw = dict(hostvars.raw_get(host))
        env: dict[str, Any] = {}
        for role in roles:
            env.update(_trusted(_with_role_path(defaults.get(role) or {}, ROLES_DIR / role)))
        env.update(raw)
        for role in roles:
            env.update(_trusted(rvars.get(role) or {}))
            env.update(_trusted(pvars.get(role) or {}))
        templar = self._templar.copy_with_new_env(available_variables=env)
        values: dict[str, Any] = {}
        errors: dict[str, BaseException] = {}
        wanted = [k for k in env if isinstance(k, str) and (k.startswith(ROLE_PREFIXES))]
        for name in wanted:
            try:
                values[name] = templar.template(env[name])
            except Exception as exc:  # any templating error is reported ...
                if not is_runtime_undefined(exc):  # ... but facts only known later
                    errors[name] = exc
        return values, errors

    @staticmethod
    def _typed(host, values, raw, options, skip=()):  # pragma: no cover
        out = []
        for name, spec in options.items():
            if name in raw and name not in skip and name in values:
                out += spec_problems(host, name, values[name], spec or {})
        return out
