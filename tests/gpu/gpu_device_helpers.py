"""Helpers for the GPU suite: the project's own logic (imported, or loaded by path) and GPU
memory holders."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import gpu_preflight  # noqa: F401  (for the tests)

from tests.loaders import load_file

ROOT = Path(__file__).resolve().parents[2]

gpu_nvml = load_file("gpu_nvml", ROOT / "plugins/module_utils/gpu_nvml.py")

# A process that holds GPU memory the way a trainer does: allocate, say so, then wait.
HOLDER = r"""
import sys, time, torch
step_mib, steps, pause = int(sys.argv[1]), int(sys.argv[2]), float(sys.argv[3])
blocks = []
for i in range(steps):
    blocks.append(torch.empty(step_mib << 20, dtype=torch.uint8, device="cuda").fill_(1))
    torch.cuda.synchronize()
    print(f"allocated {(i + 1) * step_mib}", flush=True)
    time.sleep(pause)
print("holding", flush=True)
time.sleep(3600)
"""


def start_holder(step_mib: int, steps: int, pause: float, gpu: int = 0) -> subprocess.Popen:
    env = {**os.environ, "CUDA_VISIBLE_DEVICES": str(gpu)}
    return subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(step_mib), str(steps), str(pause)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        env=env,
        start_new_session=True,  # its own process group, as gpu_drain stops one
    )


def wait_for_line(proc: subprocess.Popen, word: str, timeout: float = 120) -> str:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        line = proc.stdout.readline()
        if not line and proc.poll() is not None:
            raise AssertionError(f"holder exited with {proc.returncode} before '{word}'")
        if word in line:
            return line
    raise AssertionError(f"holder did not print '{word}' in {timeout}s")


def used_mib(gpu: int = 0) -> float:
    import pynvml

    pynvml.nvmlInit()
    try:
        info = pynvml.nvmlDeviceGetMemoryInfo(pynvml.nvmlDeviceGetHandleByIndex(gpu))
        return info.used / (1024 * 1024)
    finally:
        pynvml.nvmlShutdown()


def stop(proc: subprocess.Popen) -> None:
    if proc.poll() is None:
        os.killpg(proc.pid, 9)
        proc.wait(timeout=30)
