"""The two modules run by ansible itself on this machine (no GPU, no NVIDIA driver)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
BIN = Path(sys.executable).parent


def adhoc(module: str, args: dict, check: bool = False) -> tuple[str, dict, str]:
    """Run one module; returns (status, result, stderr), status "SUCCESS", "FAILED!", ..."""
    env = {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
        "ANSIBLE_CALLBACK_RESULT_FORMAT": "json",
    }
    cmd = [
        str(BIN / "ansible"),
        "localhost",
        "-i",
        "localhost,",
        "-c",
        "local",
        "-e",
        f"ansible_python_interpreter={sys.executable}",
        "-m",
        f"sglang_lxc.serving.{module}",
        "-a",
        json.dumps(args),
    ] + (["--check"] if check else [])
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=ROOT, timeout=120)
    # "localhost | SUCCESS => {...}"; warnings go to stderr
    head, body = proc.stdout.split(" => ", 1)
    return head.split("|", 1)[1].strip(), json.loads(body), proc.stderr


def test_nvml_facts_without_a_driver():
    status, res, _ = adhoc("nvml_facts", {"disk_paths": ["/nonexistent/models"]})
    assert status == "SUCCESS", res
    facts = res["ansible_facts"]["gpu_nvml"]
    if facts["nvml_available"]:
        pytest.skip("this machine has an NVIDIA driver")
    assert facts["gpus"] == [] and facts["gpu_count"] == 0
    assert facts["nvml_error"].startswith(("NVMLError_", "pynvml not importable"))
    assert facts["python"] == sys.executable
    assert facts["host"]["disks"]["/nonexistent/models"]["measured"] == "/"
    assert facts["host"]["memory_available_mib"] > 0


def test_gpu_drain_stop_check_mode_with_nothing_holding_the_gpus():
    if Path("/dev/nvidiactl").exists():
        # this machine's real /proc is read: any process here may hold a GPU now
        pytest.skip("this machine has NVIDIA devices (tests/gpu drains on a device)")
    status, res, err = adhoc(
        "gpu_drain_stop", {"gpu_holders": True, "grace_seconds": 5}, check=True
    )
    assert status == "SUCCESS" and not res["changed"], res
    assert "nothing outside the kept units holds /dev/nvidia*" in " ".join(err.split())


def test_gpu_drain_stop_refuses_bad_input():
    status, res, _ = adhoc("gpu_drain_stop", {"grace_seconds": 0, "force": True})
    assert status == "FAILED!", res
    assert "gpu_drain_grace_seconds must be greater than 0" in res["msg"]
    assert "gpu_drain_force: true needs a selector" in res["msg"]
