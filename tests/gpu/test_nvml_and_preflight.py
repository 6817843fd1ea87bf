"""nvml_facts' logic and the preflight verdicts on a real driver."""

from __future__ import annotations

import pytest
from gpu_device_helpers import gpu_nvml, gpu_preflight

pytestmark = pytest.mark.gpu


@pytest.fixture(scope="module")
def facts():
    import pynvml

    return gpu_nvml.collect(pynvml)


def test_nvml_facts_on_a_real_driver(facts):
    assert facts["nvml_available"], facts.get("nvml_error")
    assert facts["gpu_count"] >= 1
    assert facts["driver_version"].count(".") >= 1
    assert int(facts["cuda_driver_major"]) >= 12
    for gpu in facts["gpus"]:
        major, minor = str(gpu["compute_capability"]).split(".")
        assert int(major) >= 7 and minor.isdigit()
        assert gpu["memory_total_mib"] > 1024
        assert 0 <= gpu["memory_used_mib"] <= gpu["memory_total_mib"]
        assert gpu["uuid"].startswith("GPU-")
    print({k: facts[k] for k in ("driver_version", "cuda_driver_version", "gpu_count")})
    print([(g["name"], g["compute_capability"]) for g in facts["gpus"]])


def checks_for(facts, capabilities):
    return {
        "expected_count": facts["gpu_count"],
        "compute_capabilities": capabilities,
        "cuda_major": 13 if int(facts["cuda_driver_major"]) >= 13 else 12,
        "uvm_present": True,
        "libcuda": "/found/by/ldconfig",
    }


def test_preflight_fails_the_sm120_check_with_its_fix(facts):
    capability = str(facts["gpus"][0]["compute_capability"])
    if capability == "12.0":
        pytest.skip("this GPU is SM120 itself")
    verdicts = {
        v["check"]: v
        for v in gpu_preflight.gpu_preflight_verdicts(facts, checks_for(facts, ["12.0"]))
    }
    cc = verdicts["compute_capability"]
    assert cc["status"] == "fail"
    assert f"is {capability}" in cc["detail"] and "12.0" in cc["detail"]
    assert "gpu_facts_compute_capabilities" in cc["fix"]
    print(gpu_preflight.gpu_preflight_report(list(verdicts.values())))


def test_preflight_passes_with_the_device_capability_allowed(facts):
    capabilities = sorted({str(g["compute_capability"]) for g in facts["gpus"]})
    verdicts = gpu_preflight.gpu_preflight_verdicts(facts, checks_for(facts, capabilities))
    by_check = {v["check"]: v["status"] for v in verdicts}
    assert by_check["nvml"] == "pass"
    assert by_check["gpu_count"] == "pass"
    assert by_check["compute_capability"] == "pass"
    assert by_check["driver"] == "pass", gpu_preflight.gpu_preflight_report(verdicts)
