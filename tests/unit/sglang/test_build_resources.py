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


def test_page_cache_the_kernel_reclaims_first_is_available(tmp_path):
    """A container that read a model once: its cgroup's usage is mostly inactive file pages.
    The working set (usage less those) is what a build cannot have; the rest it can."""
    (tmp_path / "proc" / "self").mkdir(parents=True)
    (tmp_path / "proc" / "meminfo").write_text(f"MemAvailable: {60 * 1024 * 1024} kB\n")
    (tmp_path / "proc" / "self" / "cgroup").write_text("0::/lxc/230\n")
    cg = tmp_path / "sys" / "fs" / "cgroup" / "lxc" / "230"
    cg.mkdir(parents=True)
    (tmp_path / "sys" / "fs" / "cgroup" / "cgroup.controllers").write_text("cpu memory\n")
    (cg / "memory.max").write_text(str(16 * GIB))
    (cg / "memory.current").write_text(str(15 * GIB))
    (cg / "memory.stat").write_text(f"anon {2 * GIB}\nfile {13 * GIB}\nactive_file {GIB}\n"
                                    f"inactive_file {12 * GIB}\n")
    out = res.probe(str(tmp_path), affinity=2)
    assert out["mem_available_bytes"] == 13 * GIB  # 16 - (15 - 12)
    assert out["sources"]["cgroup_inactive_file_bytes"] == 12 * GIB
    (cg / "memory.stat").write_text("anon 1\n")  # none reclaimable: limit - usage, as before
    assert res.probe(str(tmp_path), affinity=2)["mem_available_bytes"] == GIB


@pytest.mark.parametrize(("text", "expected"), [
    ("inactive_file 4096\nactive_file 8192\n", 4096),
    ("cache 1\ninactive_file 10\ntotal_inactive_file 30\n", 30),  # v1: the subtree
    ("", 0), (None, 0), ("inactive_file x\n", 0),
])
def test_inactive_file(text, expected):
    assert res.inactive_file(text) == expected


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
