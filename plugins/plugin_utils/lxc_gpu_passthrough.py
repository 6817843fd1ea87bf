# Copyright: sglang-lxc contributors
# Apache-2.0
"""NVIDIA GPU passthrough into Proxmox containers: the ``lxc.*`` config lines (role proxmox_lxc).

The character-device majors come from the node's ``/proc/devices`` (they change between
kernels), the GPUs from its ``/dev/nvidia*`` nodes. Controller side, plain Python: the filters in
plugins/filter/proxmox_lxc.py wrap ``nvidia_passthrough`` and ``nvidia_owned_lines``;
plugins/action/proxmox_lxc_probe.py uses them too. Unit-tested in
tests/unit/proxmox_lxc/test_filters.py with recorded listings of an 8-GPU node.
"""

from __future__ import annotations

import re

_GPU_NODE = re.compile(r"^/dev/nvidia(\d+)$")
# Device nodes a CUDA process opens besides its GPUs; each is passed through when present.
_CONTROL_NODES = (
    "/dev/nvidiactl",
    "/dev/nvidia-uvm",
    "/dev/nvidia-uvm-tools",
    "/dev/nvidia-modeset",
)


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
    """The GPU indexes of the ``/dev/nvidiaN`` nodes present, sorted."""
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
