# Copyright: sglang-lxc contributors
# Apache-2.0
"""Proxmox container specs (role proxmox_lxc): each spec over the node-wide defaults, and every
problem with a node's specs, each naming the variable and host (vmids, names, hostnames, sizes,
addresses, clones, GPUs, mounts), before anything runs on the node.

Also the one home of how a value is shown with its type in messages (``describe``), which the
validation pass re-exports (plugins/plugin_utils/validate_common.py).

Controller side, plain Python: used by plugins/action/proxmox_lxc_probe.py and
plugins/plugin_utils/validate_containers.py (action ``sglang_lxc_validate``); no filter wraps
it. Unit-tested in tests/unit/proxmox_lxc/test_filters.py and test_probe.py.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any

VMID_MIN, VMID_MAX = 100, 999_999_999


def lxc_container_errors(
    containers: list[dict],
    node: str,
    memory_floor: int = 512,
    recreate: list | None = None,
    others: list[dict] | None = None,
) -> list[str]:
    """Every problem with a node's container specs, each naming the variable and host.

    ``others`` are the containers of the other nodes, for duplicates across the cluster.
    """
    errors: list[str] = []
    var = f"proxmox_lxc_containers (node {node})"
    seen_vmid: dict[int, str] = {}
    seen_ip: dict[str, str] = {}
    seen_name: dict[str, str] = {}
    for other in others or []:
        if isinstance(other.get("vmid"), int):
            seen_vmid.setdefault(other["vmid"], f"{other.get('name')} on another node")
        if other.get("ip") and other["ip"] != "dhcp":
            seen_ip.setdefault(str(other["ip"]).split("/", maxsplit=1)[0], f"{other.get('name')}")
        if other.get("name"):
            seen_name.setdefault(other["name"], "another node")
    for i, ct in enumerate(containers or []):
        name = ct.get("name") or f"#{i}"
        where = f"{var}[{name}]"
        vmid = ct.get("vmid")
        if (
            isinstance(vmid, bool)
            or not isinstance(vmid, int)
            or not (VMID_MIN <= vmid <= VMID_MAX)
        ):
            errors.append(
                f"{where}.vmid: must be an integer in {VMID_MIN}..{VMID_MAX}, got {vmid!r}; "
                "fix: give the container a free Proxmox CT id such as 200"
            )
        elif vmid in seen_vmid:
            errors.append(
                f"{where}.vmid: {vmid} is also used by {seen_vmid[vmid]}; "
                "fix: give each container its own vmid"
            )
        else:
            seen_vmid[vmid] = name
        if name in seen_name:
            errors.append(
                f"{where}.name: {name} is defined twice ({seen_name[name]}); "
                "fix: give each container its own name"
            )
        seen_name.setdefault(name, node)
        hostname = ct.get("hostname", name)
        if not is_rfc1123_hostname(hostname):
            errors.append(
                f"{where}.hostname: {hostname!r} is not a valid hostname (RFC 1123: labels of "
                "letters, digits and '-', 1-63 characters each, no spaces or ';'); "
                "fix: use a name such as ct200"
            )
        for key, unit, low in (
            ("memory", "MiB", memory_floor),
            ("cores", "cores", 1),
            ("swap", "MiB", 0),
            ("rootfs_size", "GiB", 1),
        ):
            if key not in ct:
                continue
            value = ct.get(key)
            if isinstance(value, bool) or not isinstance(value, int):
                errors.append(
                    f"{where}.{key}: must be an integer number of {unit}, got {describe(value)}; "
                    f"fix: write {key}: {_example(key)}"
                )
            elif value < low:
                floor = (
                    f"below the floor of {low} MiB (proxmox_lxc_memory_floor)"
                    if key == "memory"
                    else f"must be at least {low}"
                )
                errors.append(
                    f"{where}.{key}: {value} {unit} is {floor}; fix: raise it, or lower "
                    "proxmox_lxc_memory_floor"
                    if key == "memory"
                    else f"{where}.{key}: {value} {floor}; fix: give it {low} or more"
                )
        ip = ct.get("ip")
        if ip != "dhcp":
            try:
                iface = ipaddress.ip_interface(str(ip))
                if "/" not in str(ip):
                    raise ValueError("missing prefix length")
                addr = str(iface.ip)
                if addr in seen_ip:
                    errors.append(
                        f"{where}.ip: {addr} is also used by {seen_ip[addr]}; "
                        "fix: give each container its own address"
                    )
                seen_ip.setdefault(addr, name)
            except ValueError as exc:
                errors.append(
                    f"{where}.ip: expected 'dhcp' or an address/prefix, got {ip!r} ({exc}); "
                    "fix: write it like 10.0.3.200/24"
                )
        errors += _clone_errors(ct, where)
        gpus = ct.get("gpus", "none")
        if not (
            gpus in ("all", "none")
            or (isinstance(gpus, list) and all(isinstance(g, int) and g >= 0 for g in gpus))
        ):
            errors.append(
                f"{where}.gpus: expected 'all', 'none' or a list of GPU indexes, got {gpus!r}; "
                "fix: write gpus: all, or a list such as [0, 1]"
            )
        elif isinstance(gpus, list) and len(set(gpus)) != len(gpus):
            twice = sorted({g for g in gpus if gpus.count(g) > 1})
            errors.append(
                f"{where}.gpus: GPU {', '.join(map(str, twice))} is listed twice in {gpus}; "
                "fix: list each GPU index once"
            )
        mounts = ct.get("mounts") or []
        if not isinstance(mounts, list) or not all(isinstance(m, dict) for m in mounts):
            errors.append(
                f"{where}.mounts: must be a list of {{host_path, path}} mappings, got "
                f"{describe(mounts)}; fix: write each mount as '- host_path: ...' with 'path: ...'"
            )
            mounts = []
        paths = [m.get("path") for m in mounts]
        for mount in mounts:
            for key in ("host_path", "path"):
                if not str(mount.get(key, "")).startswith("/"):
                    errors.append(
                        f"{where}.mounts.{key}: must be an absolute path, got "
                        f"{mount.get(key)!r}; fix: write it from / (e.g. /srv/models)"
                    )
        if len(paths) != len(set(paths)):
            errors.append(
                f"{where}.mounts: the same container path is mounted twice; "
                "fix: mount each container path once"
            )
    names = {ct.get("name") for ct in [*(containers or []), *(others or [])]}
    for wanted in recreate or []:
        if wanted not in names:
            errors.append(
                f"proxmox_lxc_recreate: {wanted!r} is not a container in the inventory "
                f"(known: {', '.join(sorted(n for n in names if n)) or 'none'}); "
                "fix: name a container from proxmox_lxc_containers"
            )
    return errors


def _clone_errors(ct: dict, where: str) -> list[str]:
    """clone_from names a template's vmid (not the container's own); clone_full is a bool."""
    source = ct.get("clone_from")
    errors = []
    if source is not None and (
        isinstance(source, bool)
        or not isinstance(source, int)
        or not VMID_MIN <= source <= VMID_MAX
    ):
        errors.append(
            f"{where}.clone_from: must be the vmid of a template ({VMID_MIN}..{VMID_MAX}), got "
            f"{source!r}; fix: write clone_from: 260 (made with the proxmox_lxc template tasks)"
        )
    elif source is not None and source == ct.get("vmid"):
        errors.append(
            f"{where}.clone_from: {source} is this container's own vmid (taken by the template); "
            "fix: give the clone a vmid of its own"
        )
    if not isinstance(ct.get("clone_full", False), bool):
        errors.append(
            f"{where}.clone_full: must be true (a full copy) or false (a linked clone), got "
            f"{ct.get('clone_full')!r}; fix: write clone_full: false"
        )
    return errors


_LABEL = re.compile(r"^[A-Za-z0-9]([A-Za-z0-9-]{0,61}[A-Za-z0-9])?$")


def is_rfc1123_hostname(value) -> bool:
    """True for a hostname of RFC 1123 labels (no spaces, no shell metacharacters)."""
    if not isinstance(value, str) or not value or len(value) > 253:
        return False
    return all(_LABEL.match(label) for label in value.split("."))


def describe(value: Any) -> str:
    """A value as a person reads it, with its type: "the string '16G'", "a mapping {...}"."""
    if isinstance(value, bool):
        return f"the boolean {str(value).lower()}"
    if value is None:
        return "nothing (null)"
    if isinstance(value, int):
        return f"the integer {value}"
    if isinstance(value, float):
        return f"the number {value}"
    if isinstance(value, str):
        return f"the string {str(value)!r}"
    if isinstance(value, Mapping):
        return f"a mapping {short_repr(dict(value))}"
    if isinstance(value, Sequence):
        return f"a list {short_repr(list(value))}"
    return f"{short_repr(value)} ({type(value).__name__})"


def short_repr(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _example(key: str) -> str:
    return {
        "memory": "16384  # MiB",
        "cores": "4",
        "swap": "512  # MiB",
        "rootfs_size": "32  # GiB",
    }.get(key, "an integer")


def lxc_with_defaults(containers: list[dict], defaults: dict) -> list[dict]:
    """Each container spec over the node-wide defaults (the spec wins)."""
    out = []
    for ct in containers or []:
        merged = {**(defaults or {}), **ct}
        merged.setdefault("hostname", ct.get("name"))
        out.append(merged)
    return out
