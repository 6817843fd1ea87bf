"""proxmox_lxc on the lab node: real containers through the pct stand-in over LXC."""

from __future__ import annotations

import pytest

from tests.lablib import LAB_INVENTORY, ansible_playbook, lab_root, pct

pytestmark = pytest.mark.lab

VMID = 210


@pytest.fixture(scope="module")
def ct(lab_container):
    return lab_container(VMID, cores=1, memory=1024,
                         mounts=[{"host_path": str(lab_root() / "data/ct210/models"),
                                  "path": "/srv/models"},
                                 {"host_path": str(lab_root() / "data/ct210/checkpoints"),
                                  "path": "/srv/checkpoints"}])


def conf(vmid: int = VMID) -> str:
    return (lab_root() / "etc/pve/lxc" / f"{vmid}.conf").read_text()


def test_converged_container_passes_the_infra_checks(ct):
    proc = ct.testinfra("tests/infra/test_proxmox_lxc.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "5 passed" in proc.stdout


def test_config_is_in_proxmox_format(ct):
    text = conf()
    assert "hostname: ct210" in text
    assert "cores: 1" in text
    assert "memory: 1024" in text
    assert "net0: name=eth0,bridge=lxcbr0,ip=10.0.3.210/24,gw=10.0.3.1" in text
    assert "mp0: " + str(lab_root() / "data/ct210/models") + ",mp=/srv/models" in text
    assert "features: nesting=1" in text


def test_second_run_changes_nothing(ct):
    result = ct.provision()
    assert result.rc == 0, str(result)
    assert result.changed == 0, str(result)


def test_check_mode_reports_and_changes_nothing(ct):
    before = conf()
    result = ct.provision(extra_vars={}, check=True)
    assert result.rc == 0, str(result)
    assert result.changed == 0, str(result)
    drift = f"ct{VMID} ({VMID}): config"  # the label of the container it would converge
    assert drift not in result.output, str(result)  # nothing drifted: nothing reported
    changed_spec = {**ct.spec, "cores": 2}
    result = ansible_playbook("playbooks/containers.yml", LAB_INVENTORY,
                              extra_vars={"proxmox_lxc_containers": [changed_spec]}, check=True)
    assert result.rc == 0, str(result)
    assert drift in result.output, str(result)  # it reports that the config would change
    assert result.changed > 0, str(result)  # and counts it
    assert "would run: " in result.output and " set 210 --cores 2" in result.output, str(result)
    assert conf() == before


def test_changed_spec_is_applied_and_a_restart_is_announced(ct):
    changed = {**ct.spec, "memory": 1536}
    result = ansible_playbook("playbooks/containers.yml", LAB_INVENTORY,
                              extra_vars={"proxmox_lxc_containers": [changed]})
    assert result.rc == 0, str(result)
    assert "memory: 1536" in conf()
    assert "some changes apply at its next restart" in " ".join(result.output.split())
    result = ct.provision()
    assert result.rc == 0 and "memory: 1024" in conf()


def test_no_gpu_on_the_node_skips_passthrough_with_a_message(ct):
    result = ct.provision(extra_vars={})
    assert "no NVIDIA GPU on localhost, GPU passthrough skipped" in result.output
    assert "lxc.mount.entry: /dev/nvidia" not in conf()


def test_gpu_required_without_gpus_fails_before_any_change(ct):
    before = conf()
    spec = {**ct.spec, "gpu_required": True, "cores": 2}
    result = ansible_playbook("playbooks/containers.yml", LAB_INVENTORY,
                              extra_vars={"proxmox_lxc_containers": [spec]})
    assert result.rc != 0
    assert "proxmox_lxc_containers[ct210].gpu_required" in result.output
    assert conf() == before


def test_recreate_keeps_the_mounted_data(ct):
    ct.exec("sh", "-c", "echo weights > /srv/models/shard-00001.safetensors")
    ct.exec("sh", "-c", "echo old > /root/marker")
    result = ct.provision(extra_vars={"proxmox_lxc_recreate": [ct.name]})
    assert result.rc == 0, str(result)
    assert "Destroy the container, keeping its bind-mounted data | ct210" in result.output
    assert ct.exec("test", "-e", "/root/marker", check=False).returncode != 0, "not recreated"
    data = ct.exec("cat", "/srv/models/shard-00001.safetensors").stdout
    assert data.strip() == "weights"
    # and it is reachable again over SSH with the bootstrapped key
    proc = ct.testinfra("tests/infra/test_proxmox_lxc.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_status_and_list_through_pct(ct):
    assert pct("status", str(VMID)).stdout.strip() == "status: running"
    assert "ct210" in pct("list").stdout
