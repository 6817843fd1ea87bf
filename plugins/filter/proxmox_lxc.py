"""Filters for the proxmox_lxc role: Proxmox container configs and GPU passthrough lines.

Pure functions, unit-tested in tests/unit/proxmox_lxc/test_filters.py (and used by
plugins/action/proxmox_lxc_probe.py and sglang_lxc_validate.py).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any

VMID_MIN, VMID_MAX = 100, 999_999_999
_NUMBERED = re.compile(r"^(net|mp)(\d+)$")
_GPU_NODE = re.compile(r"^/dev/nvidia(\d+)$")
# Device nodes a CUDA process opens besides its GPUs; each is passed through when present.
_CONTROL_NODES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)


# ------------------------------------------------------------------------------ configs


def pve_conf_parse(text: str) -> dict:
    """Parse ``pct config`` output into ``{"options": {...}, "lxc": [[key, value], ...]}``."""
    options: dict[str, str] = {}
    raw: list[list[str]] = []
    for line in (text or "").splitlines():
        if line.startswith("["):
            break
        if not line.strip() or line.startswith("#"):
            continue
        key, _colon, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key.startswith("lxc."):
            raw.append([key, value])
        else:
            options[key] = value
    return {"options": options, "lxc": raw}


def _props(value: str) -> dict[str, str]:
    out: dict[str, str] = {}
    for i, part in enumerate(str(value).split(",")):
        if "=" in part:
            k, v = part.split("=", 1)
            out[k.strip()] = v.strip()
        elif i == 0 and part:
            out["_"] = part.strip()
    return out


def _join(props: dict[str, str]) -> str:
    head = [props["_"]] if "_" in props else []
    return ",".join(head + [f"{k}={v}" for k, v in props.items() if k != "_"])


def pct_options(ct: dict) -> dict[str, str]:
    """The pct options a container spec asks for (the ones ``pct set`` can change)."""
    opts: dict[str, str] = {
        "hostname": str(ct["hostname"]),
        "cores": str(int(ct["cores"])),
        "memory": str(int(ct["memory"])),
        "swap": str(int(ct["swap"])),
        "onboot": "1" if ct.get("onboot") else "0",
    }
    features = ct.get("features") or {}
    if features:
        opts["features"] = ",".join(
            f"{k}={'1' if v is True else '0' if v is False else v}"
            for k, v in sorted(features.items())
        )
    net = {"name": "eth0", "bridge": ct["bridge"], "ip": ct["ip"]}
    if ct.get("gateway"):
        net["gw"] = ct["gateway"]
    opts["net0"] = _join(net)
    if ct.get("nameserver"):
        opts["nameserver"] = ct["nameserver"]
    for i, mount in enumerate(ct.get("mounts") or []):
        props = {"_": mount["host_path"], "mp": mount["path"]}
        if mount.get("read_only"):
            props["ro"] = "1"
        props["backup"] = "0"
        opts[f"mp{i}"] = _join(props)
    return opts


def pct_create_args(ct: dict) -> list[str]:
    """Arguments after ``pct create VMID TEMPLATE``."""
    args: list[str] = []
    for key, value in pct_options(ct).items():
        args += [f"--{key}", value]
    args += ["--rootfs", f"{ct['rootfs_storage']}:{int(ct['rootfs_size'])}"]
    args += ["--unprivileged", "1" if ct.get("unprivileged") else "0"]
    args += ["--ostype", ct.get("ostype", "debian"), "--start", "0"]
    return args


def _same(key: str, want: str, have: str | None) -> bool:
    if have is None:
        return False
    if _NUMBERED.match(key) or key == "features":
        w, h = _props(want), _props(have)
        # Proxmox fills in hwaddr and type itself; compare only what we ask for.
        return all(h.get(k) == v for k, v in w.items())
    return str(want) == str(have)


def pct_set_args(ct: dict, current: dict) -> list[str]:
    """Arguments after ``pct set VMID`` that bring ``current`` (parsed config) to the spec.

    Empty when nothing differs. Mount points and NICs the spec no longer lists are deleted
    from the config (for bind mounts the host data stays where it is).
    """
    have = current.get("options", {})
    want = pct_options(ct)
    args: list[str] = []
    for key, value in want.items():
        if not _same(key, value, have.get(key)):
            args += [f"--{key}", value]
    stale = sorted(
        k for k in have if _NUMBERED.match(k) and k not in want and k.startswith(("mp", "net"))
    )
    if "features" in have and "features" not in want:
        stale.append("features")
    if "nameserver" in have and "nameserver" not in want:
        stale.append("nameserver")
    if stale:
        args += ["--delete", ",".join(stale)]
    return args


# ------------------------------------------------------------------------------ GPUs


def nvidia_majors(proc_devices: str) -> dict[str, int]:
    """Character-device majors of the NVIDIA drivers from ``/proc/devices``."""
    majors: dict[str, int] = {}
    in_char = False
    for line in (proc_devices or "").splitlines():
        stripped = line.strip()
        if stripped.startswith("Character devices"):
            in_char = True
            continue
        if stripped.startswith("Block devices"):
            in_char = False
            continue
        parts = stripped.split()
        if in_char and len(parts) == 2 and parts[0].isdigit() and parts[1].startswith("nvidia"):
            majors[parts[1]] = int(parts[0])
    return majors


def nvidia_gpu_indexes(dev_nodes: list[str]) -> list[int]:
    return sorted(int(m.group(1)) for p in dev_nodes if (m := _GPU_NODE.match(p)))


def nvidia_passthrough(proc_devices: str, dev_nodes: list[str], gpus="all") -> list[str]:
    """Proxmox config lines passing the host's NVIDIA devices into a container.

    ``gpus`` is ``"all"``, ``"none"`` or a list of GPU indexes. Majors come from
    ``/proc/devices`` (they change between kernels); one mount entry per device node present.
    Raises ValueError for a GPU index the node does not have.
    """
    if gpus in (None, "none", []):
        return []
    present = set(dev_nodes)
    indexes = nvidia_gpu_indexes(dev_nodes)
    if gpus == "all":
        chosen = indexes
    else:
        chosen = sorted({int(g) for g in gpus})
        missing = [g for g in chosen if g not in indexes]
        if missing:
            have = ", ".join(map(str, indexes)) or "none"
            raise ValueError(f"GPU index {missing} not on this node (it has: {have})")
    if not chosen:
        return []
    lines = [
        f"lxc.cgroup2.devices.allow: c {major}:* rwm"
        for major in sorted(set(nvidia_majors(proc_devices).values()))
    ]
    nodes = [f"/dev/nvidia{i}" for i in chosen]
    nodes += [n for n in _CONTROL_NODES if n in present]
    for node in nodes:
        lines.append(f"lxc.mount.entry: {node} {node[1:]} none bind,optional,create=file")
    if "/dev/nvidia-caps" in present:
        lines.append(
            "lxc.mount.entry: /dev/nvidia-caps dev/nvidia-caps none bind,optional,create=dir"
        )
    return lines


def nvidia_owned_lines(current: dict, proc_devices: str) -> list[str]:
    """Raw lines of a config that passthrough manages (to remove those no longer wanted)."""
    majors = set(nvidia_majors(proc_devices).values()) | {195}
    owned = []
    for key, value in current.get("lxc", []):
        if key == "lxc.mount.entry" and value.startswith("/dev/nvidia"):
            owned.append(f"{key}: {value}")
        elif key in ("lxc.cgroup2.devices.allow", "lxc.cgroup.devices.allow"):
            m = re.fullmatch(r"c (\d+):\* rwm", value)
            if m and int(m.group(1)) in majors:
                owned.append(f"{key}: {value}")
    return owned


# ------------------------------------------------------------------------------ validation


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
    if source is not None and (isinstance(source, bool) or not isinstance(source, int)
                               or not VMID_MIN <= source <= VMID_MAX):
        errors.append(
            f"{where}.clone_from: must be the vmid of a template ({VMID_MIN}..{VMID_MAX}), got "
            f"{source!r}; fix: write clone_from: 260 (made with the proxmox_lxc template tasks)")
    elif source is not None and source == ct.get("vmid"):
        errors.append(
            f"{where}.clone_from: {source} is this container's own vmid (taken by the template); "
            "fix: give the clone a vmid of its own")
    if not isinstance(ct.get("clone_full", False), bool):
        errors.append(
            f"{where}.clone_full: must be true (a full copy) or false (a linked clone), got "
            f"{ct.get('clone_full')!r}; fix: write clone_full: false")
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


class FilterModule:
    def filters(self):
        return {
            "pve_conf_parse": pve_conf_parse,
            "pct_options": pct_options,
            "pct_create_args": pct_create_args,
            "pct_set_args": pct_set_args,
            "nvidia_majors": nvidia_majors,
            "nvidia_gpu_indexes": nvidia_gpu_indexes,
            "nvidia_passthrough": nvidia_passthrough,
            "nvidia_owned_lines": nvidia_owned_lines,
            "lxc_container_errors": lxc_container_errors,
            "lxc_with_defaults": lxc_with_defaults,
        }
