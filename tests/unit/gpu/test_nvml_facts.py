"""nvml_facts' logic (plugins/module_utils/gpu_nvml.py) on recorded NVML answers."""

from __future__ import annotations

import pytest
from gpu_helpers import fake_pynvml, gpu_nvml, nvml, trainer_tree


def test_rtx_pro_6000_host_with_training_job(fake_proc):
    trainer_tree(fake_proc)
    fake = nvml("rtx_pro_6000_x8_training")
    facts = gpu_nvml.collect(fake, proc_root=str(fake_proc.root))

    assert facts["nvml_available"] and facts["nvml_error"] is None
    assert facts["driver_version"] == "580.95.05"
    assert facts["cuda_driver_version"] == "13.0" and facts["cuda_driver_major"] == 13
    assert facts["gpu_count"] == 8
    for i, gpu in enumerate(facts["gpus"]):
        assert gpu["index"] == i and gpu["minor_number"] == i
        assert gpu["name"] == "NVIDIA RTX PRO 6000 Blackwell Server Edition"
        assert gpu["uuid"].startswith("GPU-")
        assert gpu["compute_capability"] == "12.0"
        assert gpu["memory_total_mib"] == 97887
        assert gpu["memory_used_mib"] == 91136
        assert (gpu["pcie_gen"], gpu["pcie_width"]) == (5, 16)
        assert gpu["utilization_gpu_pct"] == 97
        assert gpu["errors"] == {}
        [proc] = gpu["processes"]
        assert proc == {
            "pid": 4101 + i,
            "used_memory_mib": 90624,
            "in_namespace": True,
            "cmdline": f"/opt/train/bin/python -u train.py --local-rank {i}",
            "unit": "trainer.service",
        }
    # the launcher holds no device, the workers do: 8 holders, all mapped to the unit
    assert [h["pid"] for h in facts["holders"]] == list(range(4101, 4109))
    assert {h["unit"] for h in facts["holders"]} == {"trainer.service"}
    assert facts["holders"][3]["gpu_minors"] == [3]
    assert facts["holders"][3]["devices"] == ["/dev/nvidia-uvm", "/dev/nvidia3", "/dev/nvidiactl"]
    # NVML was shut down again
    assert fake.initialised == 0 and fake.calls[-1] == "nvmlShutdown"


def test_inside_lxc_nvml_lists_host_pids(fake_proc):
    """In a container NVML reports host PIDs; the /proc scan still finds the holders."""
    trainer_tree(fake_proc, pids=range(301, 309))
    facts = gpu_nvml.collect(nvml("rtx_pro_6000_x8_training"), proc_root=str(fake_proc.root))
    proc0 = facts["gpus"][0]["processes"][0]
    assert proc0["pid"] == 4101 and proc0["in_namespace"] is False
    assert proc0["cmdline"] is None and proc0["unit"] is None
    assert [h["pid"] for h in facts["holders"]] == list(range(301, 309))
    assert all(h["unit"] == "trainer.service" for h in facts["holders"])


def test_idle_h200(fake_proc):
    facts = gpu_nvml.collect(nvml("h200_idle"), proc_root=str(fake_proc.root))
    [gpu] = facts["gpus"]
    assert facts["driver_version"] == "570.172.08" and facts["cuda_driver_version"] == "12.8"
    assert gpu["name"] == "NVIDIA H200" and gpu["compute_capability"] == "9.0"
    assert gpu["memory_total_mib"] == 143771 and gpu["memory_used_mib"] == 0
    assert (gpu["pcie_gen"], gpu["pcie_gen_max"], gpu["pcie_width"]) == (1, 5, 16)
    assert gpu["processes"] == []
    # a getter NVML does not support is recorded, not fatal
    assert gpu["errors"] == {"graphics_processes": "Not Supported"}
    assert facts["holders"] == []


@pytest.mark.parametrize(
    ("recording", "text"),
    [
        ("no_driver_library", "NVMLError_LibraryNotFound: NVML Shared Library Not Found"),
        ("driver_not_loaded", "NVMLError_DriverNotLoaded: Driver Not Loaded"),
    ],
)
def test_no_driver_gives_no_gpus_and_the_error(fake_proc, recording, text):
    facts = gpu_nvml.collect(nvml(recording), proc_root=str(fake_proc.root))
    assert facts["nvml_available"] is False
    assert facts["nvml_error"] == text
    assert facts["gpus"] == [] and facts["gpu_count"] == 0
    assert facts["driver_version"] is None


def test_pynvml_missing(fake_proc):
    facts = gpu_nvml.collect(
        None, proc_root=str(fake_proc.root), import_error="No module named 'pynvml'"
    )
    assert facts["pynvml_available"] is False
    assert facts["nvml_error"] == "pynvml not importable: No module named 'pynvml'"
    assert facts["gpus"] == []


def test_real_pynvml_on_this_machine_says_no_driver():
    """The real nvidia-ml-py here has no libnvidia-ml: same shape as the recording."""
    import pynvml  # a dependency of the project (pyproject): an import bug fails, not skips
    facts = gpu_nvml.collect(pynvml)
    if facts["nvml_available"]:
        pytest.skip("this machine has an NVIDIA driver")
    assert facts["gpus"] == []
    assert facts["nvml_error"].startswith(
        ("NVMLError_LibraryNotFound", "NVMLError_DriverNotLoaded")
    )


def test_error_in_the_middle_keeps_what_was_read(fake_proc):
    fake = nvml("h200_idle")
    fake.recording["devices"][0]["errors"]["nvmlDeviceGetMemoryInfo"] = "GpuIsLost"
    facts = gpu_nvml.collect(fake, proc_root=str(fake_proc.root))
    gpu = facts["gpus"][0]
    assert gpu["memory_total_mib"] is None and gpu["errors"]["memory"] == "GPU is lost"
    assert gpu["name"] == "NVIDIA H200"


def test_exclude_pids_and_non_nvidia_fds(fake_proc):
    fake_proc.add(10, "/usr/bin/python3 nvml_facts.py", devices=("/dev/nvidiactl",))
    fake_proc.add(11, "/usr/sbin/sshd -D", unit="ssh.service", devices=("/dev/null",))
    fake_proc.add(
        12,
        "/usr/bin/nvidia-persistenced",
        unit="nvidia-persistenced.service",
        devices=("/dev/nvidiactl", "/dev/nvidia0"),
        cgroup_v1=True,
    )
    holders = gpu_nvml.scan_device_holders(str(fake_proc.root), exclude_pids=[10])
    assert [(h["pid"], h["unit"], h["gpu_minors"]) for h in holders] == [
        (12, "nvidia-persistenced.service", [0])
    ]


@pytest.mark.parametrize(
    ("text", "unit"),
    [
        ("0::/system.slice/trainer.service\n", "trainer.service"),
        ("0::/system.slice/system-sglang.slice/sglang@3.service\n", "sglang@3.service"),
        ("0::/lxc/200/system.slice/trainer.service/worker\n", "trainer.service"),
        ("0::/user.slice/user-0.slice/session-4.scope\n", "session-4.scope"),
        ("12:memory:/x\n1:name=systemd:/system.slice/cron.service\n0::/\n", "cron.service"),
        ("0::/\n", None),
        ("", None),
    ],
)
def test_unit_from_cgroup(text, unit):
    assert gpu_nvml.unit_from_cgroup_text(text) == unit


def test_host_resources(tmp_path):
    meminfo = tmp_path / "meminfo"
    meminfo.write_text("MemTotal:       65536000 kB\nMemFree: 1 kB\nMemAvailable:   32768000 kB\n")
    res = gpu_nvml.host_resources([str(tmp_path / "not" / "yet")], meminfo=str(meminfo))
    assert res["memory_total_mib"] == 64000 and res["memory_available_mib"] == 32000
    assert res["cpus"] >= 1
    disk = res["disks"][str(tmp_path / "not" / "yet")]
    assert disk["measured"] == str(tmp_path) and disk["free_mib"] > 0


def test_fake_is_strict_about_init():
    fake = nvml("h200_idle")
    with pytest.raises(fake_pynvml.NVMLError) as info:
        fake.nvmlDeviceGetCount()
    assert str(info.value) == "Uninitialized"
