"""Shared fixtures. Lab fixtures create real LXC containers through the proxmox_lxc role."""

from __future__ import annotations

import subprocess

import pytest

from tests.lablib import (
    LAB_INVENTORY,
    LabContainer,
    ansible_playbook,
    lab_root,
    missing_for_lab,
    write_inventory,
)


def _bridge_exists(name: str = "lxcbr0") -> bool:
    return subprocess.run(["ip", "link", "show", "dev", name], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def lab_node():
    """This machine prepared as the lab's Proxmox node (bridge, template, key).

    A bridge this fixture had to create is deleted at the end of the session.
    """
    reason = missing_for_lab()
    if reason:
        pytest.skip(reason)
    had_bridge = _bridge_exists()
    result = ansible_playbook("playbooks/lab_node.yml", LAB_INVENTORY)
    assert result.rc == 0, str(result)
    yield lab_root()
    if not had_bridge:
        leftover = list((lab_root() / "etc/pve/lxc").glob("*.conf"))
        if not leftover:
            subprocess.run(["ip", "link", "delete", "lxcbr0"], check=False)


@pytest.fixture(scope="module")
def lab_container(lab_node, tmp_path_factory):
    """Factory: ``lab_container(vmid, **spec)`` -> a running LabContainer at 10.0.3.<vmid>.

    Every container made through it is destroyed when the test module ends.
    """
    made: list[LabContainer] = []

    def make(vmid: int, provision: bool = True, **spec) -> LabContainer:
        name = f"ct{vmid}"
        full = {
            "name": name,
            "vmid": vmid,
            "ip": f"10.0.3.{vmid}/24",
            "gateway": "10.0.3.1",
            "mounts": [
                {"host_path": str(lab_node / "data" / name / "models"), "path": "/srv/models"},
            ],
            **spec,
        }
        ct = LabContainer(vmid, tmp_path_factory.mktemp(name), full)
        made.append(ct)
        ct.destroy()  # a container left over by an interrupted run
        write_inventory(ct)
        if provision:
            result = ct.provision()
            assert result.rc == 0, str(result)
        return ct

    yield make
    for ct in made:
        ct.destroy()
