# Copyright: sglang-lxc contributors
# Apache-2.0
"""The local lab inventory's container specs: ct200, ct201, ... on the lab bridge.

Controller side, plain Python: the filter ``lab_containers`` (plugins/filter/lab.py) wraps it
for inventory/lab/group_vars/proxmox_nodes/proxmox_lxc.yml. Unit-tested in
tests/unit/proxmox_lxc/test_lab_containers.py.
"""

from __future__ import annotations


def lab_containers(
    count,
    root: str,
    first_vmid: int = 200,
    subnet: str = "10.0.3",
    bridge: str = "lxcbr0",
    extra_mounts: list[dict] | None = None,
) -> list[dict]:
    """Specs of the lab's containers: ct200, ct201, ... at 10.0.3.200, .201, ...

    extra_mounts are added to every container (the node cache's mounts, shared by all)."""
    count = int(count)
    if not 1 <= count <= 20:
        raise ValueError(f"lab_containers: between 1 and 20 containers, got {count}")
    specs = []
    for vmid in range(first_vmid, first_vmid + count):
        name = f"ct{vmid}"
        specs.append(
            {
                "name": name,
                "vmid": vmid,
                "ip": f"{subnet}.{vmid % 256}/24",
                "gateway": f"{subnet}.1",
                "bridge": bridge,
                "mounts": [
                    {"host_path": f"{root}/data/{name}/models", "path": "/srv/models"},
                    {"host_path": f"{root}/data/{name}/checkpoints", "path": "/srv/checkpoints"},
                    # the JIT caches (sglang_lxc_cache_dir), kept across container recreation
                    {"host_path": f"{root}/data/{name}/cache", "path": "/var/cache/sglang"},
                    *[dict(m) for m in extra_mounts or []],
                ],
            }
        )
    return specs
