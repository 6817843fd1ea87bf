"""Parsing of the container's CPU and memory view (plugins/modules/sglang_build_resources)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
GIB = 1024**3
spec = importlib.util.spec_from_file_location(
    "sglang_build_resources", ROOT / "plugins" / "modules" / "sglang_build_resources.py"
)
res = importlib.util.module_from_spec(spec)
spec.loader.exec_module(res)


@pytest.mark.parametrize(
    ("text", "count"), [("0-3,8,10-11", 7), ("0", 1), ("", None), ("0-127", 128)]
)
def test_parse_cpuset(text, count):
    assert res.parse_cpuset(text) == count


@pytest.mark.parametrize(
    ("text", "cpus"),
    [("max 100000", None), ("200000 100000", 2), ("150000 100000", 2), ("50000 100000", 1)],
)
def test_parse_cpu_max(text, cpus):
    assert res.parse_cpu_max(text) == cpus


def test_cgroup_v1_limit_below_meminfo(tmp_path):
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "meminfo").write_text(f"MemAvailable: {256 * 1024 * 1024} kB\n")
    (tmp_path / "proc" / "self" / "cgroup").write_text(
        "4:memory:/lxc/231\n3:cpuset:/lxc/231\n2:cpu,cpuacct:/lxc/231\n"
    )
    mem = tmp_path / "sys" / "fs" / "cgroup" / "memory" / "lxc" / "231"
    mem.mkdir(parents=True)
    (mem / "memory.limit_in_bytes").write_text(str(24 * GIB))
    (mem / "memory.usage_in_bytes").write_text(str(4 * GIB))
    cpu = tmp_path / "sys" / "fs" / "cgroup" / "cpu,cpuacct" / "lxc" / "231"
    cpu.mkdir(parents=True)
    (cpu / "cpu.cfs_quota_us").write_text("400000")
    (cpu / "cpu.cfs_period_us").write_text("100000")
    cpuset = tmp_path / "sys" / "fs" / "cgroup" / "cpuset" / "lxc" / "231"
    cpuset.mkdir(parents=True)
    (cpuset / "cpuset.cpus").write_text("0-7")
    out = res.probe(str(tmp_path), affinity=64)
    assert out["cpus"] == 4
    assert out["mem_available_bytes"] == 20 * GIB
    assert out["sources"]["cgroup"] == "v1"


def test_v1_unlimited_uses_meminfo(tmp_path):
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "meminfo").write_text(f"MemAvailable: {8 * 1024 * 1024} kB\n")
    (tmp_path / "proc" / "self" / "cgroup").write_text("4:memory:/\n")
    mem = tmp_path / "sys" / "fs" / "cgroup" / "memory"
    mem.mkdir(parents=True)
    (mem / "memory.limit_in_bytes").write_text("9223372036854771712")
    out = res.probe(str(tmp_path), affinity=2)
    assert out["mem_available_bytes"] == 8 * GIB
    assert out["sources"]["mem"]["decided_by"] == "meminfo"


def test_this_machine_probe_is_sane():
    out = res.probe()
    assert out["cpus"] >= 1
    assert out["mem_available_bytes"] > 0
