"""Preflight verdicts (plugins/plugin_utils/gpu_preflight.py) from recorded NVML answers."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from gpu_helpers import gpu_nvml, gpu_preflight, nvml, trainer_tree

ROOT = Path(__file__).resolve().parents[3]
CHECKS = {
    "expected_count": 8,
    "compute_capabilities": ["12.0"],
    "cuda_major": 13,
    "uvm_present": True,
    "libcuda": "/usr/lib/x86_64-linux-gnu/libcuda.so.1",
    "model_store_path": "/srv/models",
    "model_store_min_free_gib": 600,
    "build": {"from_source": True, "jobs": 20, "threads": 1, "gib_per_thread": 4, "reserve_gib": 8},
}
HOST_OK = {
    "memory_total_mib": 512 * 1024,
    "memory_available_mib": 400 * 1024,
    "cpus": 64,
    "disks": {"/srv/models": {"measured": "/srv/models", "free_mib": 2000 * 1024}},
}


def facts_for(recording, fake_proc, host=HOST_OK):
    facts = gpu_nvml.collect(nvml(recording), proc_root=str(fake_proc.root))
    facts["host"] = host
    return facts


def by_check(verdicts):
    return {v["check"]: v for v in verdicts}


def test_rtx_pro_6000_host_passes(fake_proc):
    trainer_tree(fake_proc)
    verdicts = gpu_preflight.gpu_preflight_verdicts(
        facts_for("rtx_pro_6000_x8_training", fake_proc), CHECKS
    )
    assert {v["check"]: v["status"] for v in verdicts} == {
        "nvml": "pass",
        "gpu_count": "pass",
        "compute_capability": "pass",
        "driver": "pass",
        "nvidia_uvm": "pass",
        "libcuda": "pass",
        "model_store_disk": "pass",
        "build_memory": "pass",
    }
    assert gpu_preflight.gpu_preflight_failed(verdicts) == []
    assert all(v["fix"] is None for v in verdicts)


def test_h200_fails_count_capability_and_driver_with_fixes(fake_proc):
    verdicts = by_check(
        gpu_preflight.gpu_preflight_verdicts(facts_for("h200_idle", fake_proc), CHECKS)
    )
    assert verdicts["gpu_count"]["status"] == "fail"
    assert "NVML sees 1 GPU(s), the inventory expects 8" in verdicts["gpu_count"]["detail"]
    assert "lxc.mount.entry" in verdicts["gpu_count"]["fix"]
    cc = verdicts["compute_capability"]
    assert cc["status"] == "fail" and "GPU 0 (NVIDIA H200) is 9.0" in cc["detail"]
    assert "gpu_facts_compute_capabilities" in cc["fix"]
    drv = verdicts["driver"]
    assert drv["status"] == "fail"
    assert "driver 570.172.08 is older than 580.65.06, the minimum for CUDA 13" in drv["detail"]
    assert "supports CUDA up to 12.8" in drv["detail"]
    assert "580.65.06" in drv["fix"]


def test_h200_passes_when_configured_for_it(fake_proc):
    checks = {
        **CHECKS,
        "expected_count": 1,
        "compute_capabilities": ["9.0", "12.0"],
        "cuda_major": 12,
    }
    verdicts = gpu_preflight.gpu_preflight_verdicts(facts_for("h200_idle", fake_proc), checks)
    assert gpu_preflight.gpu_preflight_failed(verdicts) == []


@pytest.mark.parametrize("recording", ["no_driver_library", "driver_not_loaded"])
def test_no_driver_fails_with_the_nvml_text(fake_proc, recording):
    verdicts = by_check(
        gpu_preflight.gpu_preflight_verdicts(facts_for(recording, fake_proc), CHECKS)
    )
    assert verdicts["nvml"]["status"] == "fail"
    assert "expected 8 GPU(s)" in verdicts["nvml"]["detail"]
    assert "--no-kernel-module" in verdicts["nvml"]["fix"]
    assert {verdicts[c]["status"] for c in ("gpu_count", "compute_capability", "driver")} == {
        "skip"
    }
    # /dev/nvidia-uvm is judged on its own, NVML or not
    assert verdicts["nvidia_uvm"]["status"] == "pass"


def test_missing_pynvml_names_the_install_fix(fake_proc):
    facts = gpu_nvml.collect(None, proc_root=str(fake_proc.root), import_error="No module")
    facts["host"] = HOST_OK
    nv = by_check(gpu_preflight.gpu_preflight_verdicts(facts, CHECKS))["nvml"]
    assert nv["status"] == "fail" and "pynvml not importable" in nv["detail"]
    assert "nvidia-ml-py" in nv["fix"]


def test_lab_expects_no_gpu_skips_gpu_checks(fake_proc):
    checks = {**CHECKS, "expected_count": 0, "uvm_present": False}
    verdicts = gpu_preflight.gpu_preflight_verdicts(
        facts_for("no_driver_library", fake_proc), checks
    )
    gpu = [v for v in verdicts if v["check"] not in ("model_store_disk", "build_memory")]
    assert len(gpu) == 6
    assert all(v["status"] == "skip" and v["detail"].startswith("no GPU") for v in gpu)
    assert gpu_preflight.gpu_preflight_failed(verdicts) == []


def test_missing_uvm(fake_proc):
    trainer_tree(fake_proc)
    checks = {**CHECKS, "uvm_present": False}
    uvm = by_check(
        gpu_preflight.gpu_preflight_verdicts(
            facts_for("rtx_pro_6000_x8_training", fake_proc), checks
        )
    )["nvidia_uvm"]
    assert uvm["status"] == "fail" and "nvidia-modprobe -u -c=0" in uvm["fix"]
    assert "/proc/devices" in uvm["fix"]


def test_disk_too_small_and_not_yet_created(fake_proc):
    host = {
        **HOST_OK,
        "disks": {"/srv/models": {"measured": "/srv", "free_mib": 100 * 1024}},
    }
    disk = by_check(
        gpu_preflight.gpu_preflight_verdicts(facts_for("h200_idle", fake_proc, host), CHECKS)
    )["model_store_disk"]
    assert disk["status"] == "fail"
    assert disk["detail"] == (
        "/srv/models (measured at /srv): 100.0 GiB free, the models need 600.0 GiB"
    )
    assert "free 500.0 GiB" in disk["fix"] and "mp=/srv/models" in disk["fix"]


@pytest.mark.parametrize(
    ("available_gib", "status", "fit"),
    [(400, "pass", 98), (48, "warn", 10), (10, "fail", 0)],
)
def test_build_memory(fake_proc, available_gib, status, fit):
    host = {**HOST_OK, "memory_available_mib": available_gib * 1024}
    mem = by_check(
        gpu_preflight.gpu_preflight_verdicts(facts_for("h200_idle", fake_proc, host), CHECKS)
    )["build_memory"]
    assert mem["status"] == status
    assert f"{fit} job(s) fit" in mem["detail"]
    assert (mem["fix"] is None) == (status == "pass")


def example_build_checks(from_source: bool) -> dict:
    """The build checks inventory/example's preflight gets: its group_vars, the role's defaults."""
    defaults = yaml.safe_load((ROOT / "roles/gpu_facts/defaults/main.yml").read_text())
    example = yaml.safe_load(
        (ROOT / "inventory/example/group_vars/sglang_servers/gpu.yml").read_text()
    )
    merged = {**defaults, **example, "gpu_facts_build_from_source": from_source}
    return {
        key: merged[f"gpu_facts_build_{key}"]
        for key in ("from_source", "jobs", "threads", "gib_per_thread", "reserve_gib")
    }


def test_example_wheel_install_has_no_build_memory_check(fake_proc):
    """inventory/example keeps the lock's wheel: nothing is compiled, no memory is asked."""
    host = {**HOST_OK, "memory_available_mib": 24 * 1024, "cpus": 16}
    checks = {**CHECKS, "build": example_build_checks(False)}
    mem = by_check(
        gpu_preflight.gpu_preflight_verdicts(facts_for("h200_idle", fake_proc, host), checks)
    )["build_memory"]
    assert mem["status"] == "skip"
    assert mem["detail"].startswith("no source build (sglang_kernel_from_source: false)")


def test_source_build_on_24_gib_asks_16_gib_per_thread(fake_proc):
    host = {**HOST_OK, "memory_available_mib": 24 * 1024, "cpus": 16}
    for build in (example_build_checks(True), {"from_source": True}):  # example; role defaults
        mem = by_check(
            gpu_preflight.gpu_preflight_verdicts(
                facts_for("h200_idle", fake_proc, host), {**CHECKS, "build": build}
            )
        )["build_memory"]
        assert "x 16.0 GiB (the measured peak of one nvcc thread, docs/build-caps.md)" in (
            mem["detail"]
        )
        assert "1 job(s) fit, the build runs 1 (MAX_JOBS=1)" in mem["detail"]
    # the example asks for the seed's 20 jobs: one fits, so it warns; the role's default asks one
    assert example_build_checks(True)["jobs"] == 20
    defaults = by_check(
        gpu_preflight.gpu_preflight_verdicts(
            facts_for("h200_idle", fake_proc, host), {**CHECKS, "build": {"from_source": True}}
        )
    )["build_memory"]
    assert defaults["status"] == "pass"


def test_build_jobs_that_fit_matches_the_seed_cap():
    # the seed's build survived with 20 jobs: ~90 GiB available, 4 GiB per job, 8 GiB reserve
    assert gpu_preflight.build_jobs_that_fit(90 * 1024, 8, 4, 1) == 20
    assert gpu_preflight.build_jobs_that_fit(4 * 1024, 8, 4, 1) == 0


def test_report_lines():
    lines = gpu_preflight.gpu_preflight_report(
        [
            {"check": "driver", "status": "fail", "detail": "too old", "fix": "upgrade"},
            {"check": "nvml", "status": "skip", "detail": "no GPU", "fix": None},
        ]
    )
    assert lines == ["FAIL driver: too old -> fix: upgrade", "SKIP nvml: no GPU"]


def test_summary(fake_proc):
    lab = gpu_preflight.gpu_preflight_verdicts(
        facts_for("no_driver_library", fake_proc), {**CHECKS, "expected_count": 0}
    )
    assert gpu_preflight.gpu_preflight_summary(lab) == "2 pass, 6 skip (no GPU)"
    wheel = gpu_preflight.gpu_preflight_verdicts(
        facts_for("no_driver_library", fake_proc),
        {**CHECKS, "expected_count": 0, "build": {"from_source": False, "jobs": 20}},
    )
    assert gpu_preflight.gpu_preflight_summary(wheel) == (
        "1 pass, 7 skip (no GPU; build_memory: no source build)"
    )
    h200 = gpu_preflight.gpu_preflight_verdicts(facts_for("h200_idle", fake_proc), CHECKS)
    assert gpu_preflight.gpu_preflight_summary(h200) == (
        "3 fail (gpu_count, compute_capability, driver), 5 pass"
    )


def test_missing_libcuda_names_the_driver_fix(fake_proc):
    """NVML answers (the host's driver) but the container's loader has no libcuda.so.1."""
    trainer_tree(fake_proc)
    facts = facts_for("rtx_pro_6000_x8_training", fake_proc)
    verdicts = by_check(gpu_preflight.gpu_preflight_verdicts(facts, {**CHECKS, "libcuda": ""}))
    libcuda = verdicts["libcuda"]
    assert libcuda["status"] == "fail"
    assert "ldconfig -p" in libcuda["detail"] and "Triton" in libcuda["detail"]
    assert "--no-kernel-module" in libcuda["fix"]
    assert "/etc/ld.so.conf.d/" in libcuda["fix"]
    assert "lib64/stubs/libcuda.so" in libcuda["fix"]
    assert [v["check"] for v in gpu_preflight.gpu_preflight_failed(list(verdicts.values()))] == [
        "libcuda"
    ]


def test_libcuda_not_probed_is_skipped(fake_proc):
    checks = {k: v for k, v in CHECKS.items() if k != "libcuda"}
    verdicts = by_check(
        gpu_preflight.gpu_preflight_verdicts(
            facts_for("rtx_pro_6000_x8_training", fake_proc), checks
        )
    )
    assert verdicts["libcuda"]["status"] == "skip"
