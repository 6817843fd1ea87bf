"""Helpers for the GPU unit tests: our pure logic (module_utils loaded by path, plugin_utils
imported), fake /proc trees."""

from __future__ import annotations

import os
import sys
from pathlib import Path

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import gpu_drain, gpu_preflight  # noqa: F401  (for the tests)

from tests.loaders import load_file

ROOT = Path(__file__).resolve().parents[3]
RECORDINGS = Path(__file__).with_name("recordings")
sys.path.insert(0, str(ROOT / "tests" / "standins"))

import fake_pynvml  # noqa: E402  (path set just above)

gpu_nvml = load_file("gpu_nvml", ROOT / "plugins/module_utils/gpu_nvml.py")
gpu_drain_plan = load_file("gpu_drain_plan", ROOT / "plugins/module_utils/gpu_drain_plan.py")


def nvml(name: str) -> fake_pynvml.FakeNvml:
    return fake_pynvml.FakeNvml(RECORDINGS / f"{name}.json")


class FakeProc:
    """A /proc look-alike: add(pid, cmdline, unit, devices) makes fd links to /dev paths."""

    def __init__(self, root: Path):
        self.root = root
        root.mkdir(parents=True, exist_ok=True)

    def add(self, pid, cmdline, unit=None, devices=(), cgroup_v1=False, comm=None):
        d = self.root / str(pid)
        (d / "fd").mkdir(parents=True)
        (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in cmdline.split()) + b"\0")
        (d / "comm").write_text((comm or cmdline.split()[0].rsplit("/", 1)[-1]) + "\n")
        path = f"/system.slice/{unit}" if unit else "/user.slice/user-0.slice/session-3.scope"
        v1 = f"12:memory:{path}\n1:name=systemd:{path}\n0::/\n"
        text = v1 if cgroup_v1 else f"0::{path}\n"
        (d / "cgroup").write_text(text)
        fds = ["/dev/null", "pipe:[1234]", *devices]
        for n, target in enumerate(fds):
            os.symlink(target, d / "fd" / str(n))
        return d


def trainer_tree(proc: FakeProc, pids=range(4101, 4109), unit="trainer.service"):
    """torchrun launcher + 8 DDP workers, worker i on /dev/nvidia<i>, all in ``unit``."""
    proc.add(
        4100,
        "/opt/train/bin/python -m torch.distributed.run --nproc-per-node 8 train.py",
        unit=unit,
    )
    for i, pid in enumerate(pids):
        proc.add(
            pid,
            f"/opt/train/bin/python -u train.py --local-rank {i}",
            unit=unit,
            devices=("/dev/nvidiactl", f"/dev/nvidia{i}", "/dev/nvidia-uvm"),
        )
