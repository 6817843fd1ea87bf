"""Unit tests of the proxmox_lxc role's logic (plugins/plugin_utils/pct_config.py,
lxc_gpu_passthrough.py, lxc_spec.py; filters in plugins/filter/proxmox_lxc.py) with recorded
listings of an 8-GPU node."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import lxc_gpu_passthrough as gpu
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import lxc_spec
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import pct_config as pct

HERE = Path(__file__).parent
ROOT = HERE.parents[2]

PROC = (HERE / "data/proc_devices_8gpu.txt").read_text()
DEV = (HERE / "data/dev_nvidia_8gpu.txt").read_text().split()


def spec(**kw):
    base = {"name": "ct200", "vmid": 200, "hostname": "ct200", "cores": 8, "memory": 65536,
            "swap": 0, "bridge": "vmbr0", "ip": "10.10.0.200/24", "gateway": "10.10.0.1",
            "onboot": True, "unprivileged": True, "features": {"nesting": True},
            "rootfs_storage": "local-lvm", "rootfs_size": 64, "gpus": "all",
            "mounts": [{"host_path": "/tank/models", "path": "/srv/models"}]}
    base.update(kw)
    return base


def test_majors_come_from_proc_devices_character_section_only():
    majors = gpu.nvidia_majors(PROC)
    assert majors == {"nvidia-frontend": 195, "nvidia-nvswitch": 234, "nvidia-nvlink": 235,
                      "nvidia-caps": 236, "nvidia-caps-imex-channels": 237, "nvidia-uvm": 508}


def test_all_gpus_passthrough_lines():
    lines = gpu.nvidia_passthrough(PROC, DEV, "all")
    allow = [ln for ln in lines if "devices.allow" in ln]
    assert allow == [f"lxc.cgroup2.devices.allow: c {m}:* rwm"
                     for m in (195, 234, 235, 236, 237, 508)]
    mounts = [ln.split()[1] for ln in lines if ln.startswith("lxc.mount.entry")]
    assert mounts == [f"/dev/nvidia{i}" for i in range(8)] + [
        "/dev/nvidiactl", "/dev/nvidia-uvm", "/dev/nvidia-uvm-tools", "/dev/nvidia-modeset",
        "/dev/nvidia-caps"]
    assert "lxc.mount.entry: /dev/nvidia3 dev/nvidia3 none bind,optional,create=file" in lines
    assert lines[-1].endswith("create=dir")


def test_majors_are_never_hard_coded():
    other_kernel = PROC.replace("508 nvidia-uvm", "511 nvidia-uvm")
    lines = gpu.nvidia_passthrough(other_kernel, DEV, "all")
    assert "lxc.cgroup2.devices.allow: c 511:* rwm" in lines
    assert "lxc.cgroup2.devices.allow: c 508:* rwm" not in lines


def test_chosen_gpus_only():
    lines = gpu.nvidia_passthrough(PROC, DEV, [2, 3])
    gpu_mounts = [ln for ln in lines if ln.startswith("lxc.mount.entry: /dev/nvidia")
                  and ln.split()[1][len("/dev/nvidia"):].isdigit()]
    assert [ln.split()[1] for ln in gpu_mounts] == ["/dev/nvidia2", "/dev/nvidia3"]
    assert any("/dev/nvidiactl" in ln for ln in lines)


def test_unknown_gpu_index_is_refused():
    with pytest.raises(ValueError, match=r"GPU index \[9\] not on this node"):
        gpu.nvidia_passthrough(PROC, DEV, [0, 9])


def test_no_gpu_node_gives_no_lines():
    assert gpu.nvidia_passthrough("Character devices:\n  1 mem\n", [], "all") == []
    assert gpu.nvidia_passthrough(PROC, DEV, "none") == []


def test_owned_lines_cover_nvidia_majors_and_nodes_but_not_other_devices():
    current = {"options": {}, "lxc": [
        ["lxc.cgroup2.devices.allow", "c 195:* rwm"],
        ["lxc.cgroup2.devices.allow", "c 226:* rwm"],
        ["lxc.mount.entry", "/dev/nvidia9 dev/nvidia9 none bind,optional,create=file"],
        ["lxc.mount.entry", "/dev/dri dev/dri none bind,optional,create=dir"],
    ]}
    owned = gpu.nvidia_owned_lines(current, PROC)
    assert owned == ["lxc.cgroup2.devices.allow: c 195:* rwm",
                     "lxc.mount.entry: /dev/nvidia9 dev/nvidia9 none bind,optional,create=file"]


def test_config_round_trip_and_set_args():
    text = ("arch: amd64\ncores: 8\nhostname: ct200\nmemory: 32768\n"
            "mp0: /tank/models,mp=/srv/models,backup=0\n"
            "mp1: /tank/old,mp=/srv/old\n"
            "net0: name=eth0,bridge=vmbr0,gw=10.10.0.1,hwaddr=BC:24:11:00:00:01,"
            "ip=10.10.0.200/24,type=veth\nonboot: 1\nfeatures: nesting=1\nswap: 0\n"
            "lxc.cgroup2.devices.allow: c 195:* rwm\n")
    current = pct.pve_conf_parse(text)
    assert current["lxc"] == [["lxc.cgroup2.devices.allow", "c 195:* rwm"]]
    args = pct.pct_set_args(spec(), current)
    assert args == ["--memory", "65536", "--delete", "mp1"]


def test_nothing_to_set_when_config_matches():
    current = pct.pve_conf_parse("\n".join(f"{k}: {v}" for k, v in pct.pct_options(spec()).items()))
    assert pct.pct_set_args(spec(), current) == []


def test_create_args():
    args = pct.pct_create_args(spec())
    assert args[args.index("--rootfs") + 1] == "local-lvm:64"
    assert args[args.index("--unprivileged") + 1] == "1"
    assert args[args.index("--net0") + 1] == "name=eth0,bridge=vmbr0,ip=10.10.0.200/24,gw=10.10.0.1"
    assert args[args.index("--mp0") + 1] == "/tank/models,mp=/srv/models,backup=0"


@pytest.mark.parametrize(
    ("change", "message"),
    [
        ({"vmid": 99}, "proxmox_lxc_containers (node kpro6)[ct200].vmid: must be an integer"),
        ({"vmid": "200"}, "[ct200].vmid: must be an integer"),
        ({"memory": 256}, "[ct200].memory: 256 MiB is below the floor of 512 MiB"),
        ({"ip": "10.10.0.300/24"}, "[ct200].ip: expected 'dhcp' or an address/prefix"),
        ({"ip": "10.10.0.20"}, "[ct200].ip: expected 'dhcp' or an address/prefix"),
        ({"gpus": "some"}, "[ct200].gpus: expected 'all', 'none' or a list"),
        ({"mounts": [{"host_path": "tank", "path": "/srv/m"}]}, "mounts.host_path: must be an"),
    ],
)
def test_bad_specs_are_named(change, message):
    errors = lxc_spec.lxc_container_errors([spec(**change)], "kpro6")
    assert any(message in e for e in errors), errors


def test_duplicates_within_and_across_nodes():
    a = spec()
    b = spec(name="ct201", hostname="ct201")
    errors = lxc_spec.lxc_container_errors([a, b], "kpro6")
    assert any("[ct201].vmid: 200 is also used by ct200" in e for e in errors)
    assert any("[ct201].ip: 10.10.0.200 is also used by ct200" in e for e in errors)
    other = [spec(name="ct300", vmid=300, ip="10.10.0.200/24")]
    errors = lxc_spec.lxc_container_errors([a], "kpro7", others=other)
    assert any("[ct200].ip: 10.10.0.200 is also used by ct300" in e for e in errors)


def test_recreate_must_name_a_known_container():
    errors = lxc_spec.lxc_container_errors([spec()], "kpro6", recreate=["ct999"])
    assert errors == ["proxmox_lxc_recreate: 'ct999' is not a container in the inventory "
                      "(known: ct200); fix: name a container from proxmox_lxc_containers"]


def test_defaults_merge_under_the_spec():
    merged = lxc_spec.lxc_with_defaults([{"name": "ct9", "vmid": 900, "cores": 4}],
                                  {"cores": 2, "memory": 2048})
    assert merged == [{"cores": 4, "memory": 2048, "name": "ct9", "vmid": 900, "hostname": "ct9"}]
