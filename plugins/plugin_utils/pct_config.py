# Copyright: sglang-lxc contributors
# Apache-2.0
"""Proxmox container configs: ``pct config`` parsed, and the ``pct create`` / ``pct set``
arguments that give a container its spec (role proxmox_lxc).

Controller side, plain Python: the filters in plugins/filter/proxmox_lxc.py wrap
``pct_create_args`` and ``pct_set_args``; plugins/action/proxmox_lxc_probe.py and the validation
pass (plugins/plugin_utils/validate_containers.py) read configs with ``pve_conf_parse``.
Unit-tested in tests/unit/proxmox_lxc/test_filters.py.
"""

from __future__ import annotations

import re

_NUMBERED = re.compile(r"^(net|mp)(\d+)$")


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


def split_props(value: str) -> dict[str, str]:
    """A property string (``name=eth0,ip=...``) as a dict; a leading bare value is key ``_``."""
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
        w, h = split_props(want), split_props(have)
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
