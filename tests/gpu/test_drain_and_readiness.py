"""gpu_drain and the readiness module against real GPU memory, held by real torch processes."""

from __future__ import annotations

import itertools
import json
import os
import shutil
import subprocess
import sys
import time

import pytest
from gpu_device_helpers import ROOT, start_holder, stop, used_mib, wait_for_line

pytestmark = pytest.mark.gpu

HOLD_MIB = 2048


def drain(*, check: bool) -> dict:
    """The role's gpu_drain_stop module through ansible (ad hoc, on this machine)."""
    ansible = shutil.which("ansible", path=os.path.dirname(sys.executable)) or shutil.which(
        "ansible"
    )
    if ansible is None:
        pytest.skip("ansible-core is not installed here (scripts/gpu-check carries it)")
    args = {"gpu_holders": True, "grace_seconds": 30}
    cmd = [
        ansible,
        "localhost",
        "-c",
        "local",
        "-i",
        "localhost,",
        "-o",
        "-m",
        "sglang_lxc.serving.gpu_drain_stop",
        "-a",
        json.dumps(args),
        *(["--check"] if check else []),
    ]
    env = {**os.environ, "ANSIBLE_LOAD_CALLBACK_PLUGINS": "1", "ANSIBLE_STDOUT_CALLBACK": "json",
           "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg")}  # collections_path: this checkout
    proc = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=180)
    assert proc.returncode in (0, 2), proc.stdout[-3000:] + proc.stderr[-3000:]
    data = json.loads(proc.stdout)
    return data["plays"][0]["tasks"][0]["hosts"]["localhost"]


def test_gpu_drain_stops_a_torch_process_and_nvml_shows_the_memory_released():
    before = used_mib()
    holder = start_holder(HOLD_MIB, 1, 0)
    try:
        wait_for_line(holder, "holding")
        held = used_mib()
        assert held - before >= HOLD_MIB * 0.9, (before, held)
        plan = drain(check=True)
        targets = {pid for t in plan["planned"] for pid in t["pids"]}
        if targets != {holder.pid} or plan["kept_holders"]:
            pytest.skip(
                f"other processes hold this machine's GPUs ({plan['planned']}); "
                "gpu_drain would stop them too, so this test does not run here"
            )
        result = drain(check=False)
        assert result.get("failed") is not True, result
        assert [t["pids"] for t in result["stopped"]] == [[holder.pid]], result
        assert holder.wait(timeout=60) is not None
        deadline = time.monotonic() + 30
        while used_mib() > before + 256 and time.monotonic() < deadline:
            time.sleep(0.5)
        assert used_mib() <= before + 256, (before, used_mib())
    finally:
        stop(holder)


def test_readiness_sees_gpu_memory_progress_from_a_loading_stand_in():
    from ansible_collections.sglang_lxc.serving.plugins.module_utils import (
        sglang_readiness as readiness,
    )
    from ansible_collections.sglang_lxc.serving.plugins.module_utils import sglang_unit_probes

    nvml = sglang_unit_probes.Nvml()
    assert nvml.lib is not None, "libnvidia-ml.so.1 did not load through ctypes"
    holder = start_holder(256, 6, 1.0)  # 256 MiB a second: weights arriving
    record, states, readings = None, [], []
    try:
        for _ in range(6):
            wait_for_line(holder, "allocated")
            obs = {"port_open": False, "log_count": 0, "read_bytes": None}
            obs["memory_mib"] = nvml.used_mib([0])
            readings.append(obs["memory_mib"])
            previous = record
            # a stall timeout of 0.9 s: a look without progress a second later would be "hung"
            record = readiness.classify(obs, previous, time.monotonic(), stall_timeout=0.9)
            states.append(record["state"])
            if previous is not None:
                assert record["last_progress"] != previous["last_progress"], readings
    finally:
        stop(holder)
    assert states == ["loading"] * 6, states
    assert all(b > a for a, b in itertools.pairwise(readings)), readings
    assert "GPU memory" in readiness.describe_wait(obs)
