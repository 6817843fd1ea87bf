"""Container specs against the roles' rules and the live Proxmox nodes: cores, memory, GPUs,
bridges and subnets, OS templates, and the vmids, names and addresses other containers hold.

Part of the validation pass (action ``sglang_lxc_validate``); the node's state comes from
playbooks/files/node_state.sh. Unit-tested in tests/unit/validate.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import lxc_spec
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.pct_config import (
    pve_conf_parse,
    split_props,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_common import (
    describe,
    nested_problems,
    problem,
    spec_problems,
)


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
    state["fit"] = sections.get("fit")  # node_fit.py's JSON line (validate_fit.parse_fit)
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
        conf = pve_conf_parse("\n".join(lines))["options"]
        entry = state["containers"].setdefault(int(m.group(1)), {"name": "", "ip": None})
        entry["name"] = conf.get("hostname", entry["name"])
        if conf.get("template") == "1":
            entry["template"] = True
        net = split_props(conf.get("net0", ""))
        ip = net.get("ip", "")
        entry["ip"] = ip.split("/")[0] if ip and ip != "dhcp" else None
    return state


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
        out += nested_problems(node, "proxmox_lxc_container_defaults", defaults, options)
        # name and vmid are required in each entry, never in the defaults
        out = [
            p
            for p in out
            if not p.startswith(f"{node}: proxmox_lxc_container_defaults.name:")
            and not p.startswith(f"{node}: proxmox_lxc_container_defaults.vmid:")
        ]
    merged = list(lxc_spec.lxc_with_defaults([c for c in containers if isinstance(c, Mapping)],
                                             defaults))
    floor = memory_floor if isinstance(memory_floor, int) else 512
    out += [f"{node}: {e}" for e in lxc_spec.lxc_container_errors(merged, node, floor)]
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
        if current and current.get("template"):
            out.append(
                problem(
                    node,
                    f"{where}.vmid",
                    vmid,
                    f"CT {vmid} on {node} is a template (it cannot be started)",
                    "give this container a vmid of its own, and clone it from the template "
                    f"with clone_from: {vmid}",
                )
            )
        elif (current and current.get("name") and current["name"] != hostname
              and name not in recreate):
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
            ip = str(ct.get("ip", "")).split("/", maxsplit=1)[0]
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
        source = ct.get("clone_from")
        if source is not None and (not exists or name in recreate):
            held = live.get(source) if isinstance(source, int) else None
            if held is not None and not held.get("template"):
                out.append(
                    problem(
                        node,
                        f"{where}.clone_from",
                        source,
                        f'CT {source} on {node} ("{held.get("name")}") is not a template',
                        "make it one first: the proxmox_lxc role's template tasks "
                        f"(playbooks/template.yml -e proxmox_lxc_template_vmid={source})",
                    )
                )
        elif state.get("templates_dir") and (not exists or name in recreate):
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
    errors = lxc_spec.lxc_container_errors(containers, "all nodes", 0, list(recreate))
    if len(nodes) < 2:  # duplicates within one node are reported with that node
        errors = [e for e in errors if e.startswith("proxmox_lxc_recreate")]
    return [
        f"{'controller' if e.startswith('proxmox_lxc_recreate') else 'all nodes'}: {e}"
        for e in errors
    ]


def clone_problems(
    states: Mapping[str, Mapping[str, Any]],
    merged: Mapping[str, Sequence[Mapping[str, Any]]],
    recreate: Sequence[str] = (),
) -> list[str]:
    """Across nodes: the template a spec clones from is on the spec's own node (a linked clone
    shares its template's disk), and a spec's vmid is not held on another node (vmids are
    cluster-wide on Proxmox). ``states``: each node's parsed state; ``merged``: its specs."""
    out: list[str] = []
    for node, specs in merged.items():
        own = (states.get(node) or {}).get("containers") or {}
        for ct in specs:
            name, vmid, source = ct.get("name"), ct.get("vmid"), ct.get("clone_from")
            where = f"proxmox_lxc_containers[{name}]"
            elsewhere = {
                other: (state.get("containers") or {})
                for other, state in states.items()
                if other != node and state is not None
            }
            for other, live in elsewhere.items():
                if isinstance(vmid, int) and vmid in live and vmid not in own:
                    out.append(problem(
                        node, f"{where}.vmid", vmid,
                        f'CT {vmid} is taken on {other} ("{live[vmid].get("name")}"); vmids '
                        "are cluster-wide",
                        "pick a vmid that no node of the cluster uses",
                    ))
            exists = isinstance(vmid, int) and vmid in own
            if states.get(node) is None or not isinstance(source, int) or source in own:
                continue
            if exists and name not in recreate:
                continue
            holders = [other for other, live in elsewhere.items()
                       if (live.get(source) or {}).get("template")]
            out.append(problem(
                node, f"{where}.clone_from", source,
                f"CT {source} is a template on {', '.join(holders)}, not on {node}"
                if holders else f"CT {source} does not exist on {node}",
                f"move this container's spec to {holders[0]}'s proxmox_lxc_containers, or make "
                f"a template on {node} and clone from that" if holders else
                f"converge a container on {node} and make it a template "
                f"(playbooks/template.yml -e proxmox_lxc_template_vmid={source})",
            ))
    return out
