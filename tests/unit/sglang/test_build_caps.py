"""The sgl-kernel job cap over machine shapes (plugins/plugin_utils/build_caps.py)."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import build_caps as caps

ROOT = Path(__file__).resolve().parents[3]
GIB = 1024**3


def _load(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    assert spec.loader is not None
    spec.loader.exec_module(module)
    return module


# (cpus, memory GiB, nvcc threads, expected jobs) with the role's defaults:
# 4 GiB per nvcc thread, 4 GiB reserve. docs/build-caps.md shows the same table.
SHAPES = [
    pytest.param(2, 24, 1, 2, id="2cpu-24g: cpu-bound"),
    pytest.param(64, 512, 1, 64, id="64cpu-512g: cpu-bound"),
    pytest.param(128, 256, 32, 1, id="128cpu-256g-32threads: memory-bound to 1"),
    pytest.param(128, 256, 1, 63, id="128cpu-256g: memory-bound"),
    pytest.param(16, 32, 1, 7, id="16cpu-32g-cgroup: memory-bound"),
    pytest.param(96, 96, 1, 23, id="96cpu-96g: seed-like"),
    pytest.param(4, 6, 1, 1, id="4cpu-6g: floor of 1"),
]


@pytest.mark.parametrize(("cpus", "mem_gib", "threads", "expected"), SHAPES)
def test_cap_over_machine_shapes(cpus, mem_gib, threads, expected):
    assert caps.build_job_cap(cpus, mem_gib * GIB, 4, threads, 4) == expected


def test_threads_beyond_the_architectures_take_no_memory():
    # SM120 only: --threads 4 runs one device compile, as --threads 1 does (docs/build-caps.md)
    assert caps.build_job_cap(128, 256 * GIB, 4, 4, 4, archs=1) == 63
    assert caps.build_job_cap(128, 256 * GIB, 4, 4, 4, archs=2) == 31
    assert caps.build_job_cap(128, 256 * GIB, 4, 4, 4) == 15
    assert caps.build_job_cap_explain(128, 256 * GIB, 4, 4, 4, archs=1)["jobs_by_memory"] == 63


def test_docs_table_matches_formula():
    """Every row of the table in docs/build-caps.md is what the function returns."""
    text = (ROOT / "docs" / "build-caps.md").read_text()
    rows = [
        [c.strip() for c in line.strip().strip("|").split("|")]
        for line in text.splitlines()
        if line.startswith("| ")
    ]
    rows = [cells for cells in rows if len(cells) >= 7 and cells[1].isdigit()]
    assert len(rows) >= 5, "docs/build-caps.md lost its table"
    for cells in rows:
        row = " | ".join(cells)
        cpus, mem, per_thread, threads, reserve, jobs = (float(c) for c in cells[1:7])
        assert caps.build_job_cap(cpus, mem * GIB, per_thread, threads, reserve) == int(jobs), row


def test_container_cgroup_limit_below_host_memory(tmp_path):
    """A 16-CPU container limited to 32 GiB on a 512 GiB host: the cap follows the container."""
    probe = _load(
        "sglang_build_resources",
        ROOT / "plugins" / "modules" / "sglang_build_resources.py",
    )
    root = tmp_path
    (root / "proc").mkdir()
    (root / "proc" / "meminfo").write_text(
        f"MemTotal: {512 * 1024 * 1024} kB\nMemAvailable: {500 * 1024 * 1024} kB\n"
    )
    (root / "proc" / "self").mkdir()
    (root / "proc" / "self" / "cgroup").write_text("0::/init.scope\n")
    cg = root / "sys" / "fs" / "cgroup"
    (cg / "init.scope").mkdir(parents=True)
    (cg / "cgroup.controllers").write_text("cpuset cpu memory\n")
    (cg / "memory.max").write_text(str(32 * GIB))
    (cg / "memory.current").write_text(str(0))
    (cg / "init.scope" / "memory.max").write_text("max")
    (cg / "cpu.max").write_text("1600000 100000")
    (cg / "cpuset.cpus.effective").write_text("0-127")
    (root / "sys" / "devices" / "system" / "cpu").mkdir(parents=True)
    (root / "sys" / "devices" / "system" / "cpu" / "online").write_text("0-127")

    res = probe.probe(str(root), affinity=128)
    assert res["cpus"] == 16
    assert res["mem_available_bytes"] == 32 * GIB
    assert res["sources"]["mem"]["decided_by"] == "cgroup"
    assert caps.build_job_cap(res["cpus"], res["mem_available_bytes"], 4, 1, 4) == 7
    host_view = caps.build_job_cap(128, 500 * GIB, 4, 1, 4)
    assert host_view == 124  # what a host-view probe would have allowed: OOM in the container


@pytest.mark.parametrize(
    ("arg", "value", "name"),
    [
        ("per_thread_gb", 0, "sglang_kernel_build_per_thread_gb"),
        ("per_thread_gb", -1, "sglang_kernel_build_per_thread_gb"),
        ("nvcc_threads", 0, "sglang_kernel_nvcc_threads"),
        ("reserve_gb", -2, "sglang_kernel_build_reserve_gb"),
        ("override", -1, "sglang_kernel_max_jobs"),
        ("cpus", 0, "cpus"),
        ("per_thread_gb", "lots", "sglang_kernel_build_per_thread_gb"),
    ],
)
def test_bad_input_names_the_variable(arg, value, name):
    kwargs = {
        "cpus": 8,
        "mem_available_bytes": 64 * GIB,
        "per_thread_gb": 4,
        "nvcc_threads": 1,
        "reserve_gb": 4,
        "override": 0,
    }
    kwargs[arg] = value
    with pytest.raises(Exception, match=name):
        caps.build_job_cap(**kwargs)


def test_override_wins():
    assert caps.build_job_cap(2, 8 * GIB, 4, 1, 4, override=20) == 20


def test_explain_names_the_limit():
    assert caps.build_job_cap_explain(128, 256 * GIB, 4, 1, 4)["limited_by"] == "memory"
    assert caps.build_job_cap_explain(2, 24 * GIB, 4, 1, 4)["limited_by"] == "cpus"
    assert caps.build_job_cap_explain(2, 2 * GIB, 4, 1, 4)["limited_by"] == "floor"
