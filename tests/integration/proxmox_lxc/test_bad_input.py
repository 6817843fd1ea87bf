"""Bad inventory input stops the run before any container changes, naming variable and host."""

from __future__ import annotations

import pytest

from tests.lablib import LAB_INVENTORY, ansible_playbook, lab_root

pytestmark = pytest.mark.lab


def ct(num: int, **kw) -> dict:
    return {"name": f"ct{num}", "vmid": num, "ip": f"10.0.3.{num % 256}/24",
            "gateway": "10.0.3.1", **kw}


def snapshot() -> dict[str, str]:
    """Configs of this suite's containers (other suites may run beside it)."""
    confs = lab_root() / "etc/pve/lxc"
    return {p.name: p.read_text() for p in sorted(confs.glob("21[0-9].conf"))}


@pytest.mark.parametrize(
    ("containers", "extra", "message"),
    [
        ([ct(211, vmid=99)], {}, "proxmox_lxc_containers (node localhost)[ct211].vmid: must be "
                                 "an integer in 100..999999999, got 99"),
        ([ct(211), ct(212, vmid=211)], {}, "[ct212].vmid: 211 is also used by ct211"),
        ([ct(211), ct(212, ip="10.0.3.211/24")], {},
         "[ct212].ip: 10.0.3.211 is also used by ct211"),
        ([ct(211, memory=128)], {}, "[ct211].memory: 128 MiB is below the floor of 512 MiB"),
        ([ct(211)], {"proxmox_lxc_recreate": ["ct999"]},
         "proxmox_lxc_recreate: 'ct999' is not a container in the inventory"),
        ([ct(211, template="local:vztmpl/no-such-template.tar.zst")], {},
         "proxmox_lxc_containers[ct211].template: local:vztmpl/no-such-template.tar.zst not found"),
        ([ct(211, gpus=[9], gpu_required=True)], {},
         "proxmox_lxc_containers[ct211].gpus: GPU 9 not on localhost (it has: no GPU)"),
        ([ct(211, cores="many")], {}, "cores"),
    ],
    ids=["vmid-range", "dup-vmid", "dup-ip", "memory-floor", "recreate-unknown",
         "missing-template", "unknown-gpu", "wrong-type"],
)
def test_rejected_before_any_change(lab_node, containers, extra, message):
    before = snapshot()
    result = ansible_playbook(
        ["playbooks/validate.yml", "playbooks/containers.yml"], LAB_INVENTORY,
        extra_vars={"proxmox_lxc_containers": containers, **extra},
    )
    assert result.rc != 0, str(result)
    assert message in " ".join(result.output.split()), str(result)
    assert snapshot() == before
    assert not (lab_root() / "data/ct211").exists()


def test_vmid_held_by_another_container_is_refused(lab_container):
    other = lab_container(213)
    before = snapshot()
    result = ansible_playbook(
        "playbooks/containers.yml", LAB_INVENTORY,
        extra_vars={"proxmox_lxc_containers": [ct(214, vmid=other.vmid)]},
    )
    assert result.rc != 0
    assert ("proxmox_lxc_containers[ct214].vmid: CT 213 on localhost is \"ct213\", not ct214"
            in " ".join(result.output.split())), str(result)
    assert snapshot() == before
