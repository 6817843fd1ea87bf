"""The sgl-kernel build path of role `sglang`, for real, on a lab container.

The real sgl-kernel takes hours on two cores, so a stand-in project
(tests/fixtures/sgl_kernel_fixture: scikit-build-core + CMake + nvcc, distribution sglang-kernel,
import sgl_kernel) with the real tree's traits goes through the same tasks: its FetchContent
sources fetched offline into a controller cache through git url rewrites (local repositories made
by tests/kernel_fixture.py), the SM120-only build copy, the check of the configured build,
wheelhouse build tools, capped detached build, install, stamp. A compiler launcher records how
many compiles run at once and holds each one 2 s; ninja's own log records when each ran.

Needs the cuda_toolkit role (playbooks/toolchain.yml) for nvcc; the container has no route to
package registries, so the build tools come through the controller wheelhouse.
"""

from __future__ import annotations

import json
import re
import subprocess
import time

import pytest

from tests.kernel_fixture import make_dep_repos, url_rewrites
from tests.lablib import REPO, VENV_BIN, lab_env

pytestmark = pytest.mark.lab

VMID = 230
PLAYBOOK = "playbooks/sglang.yml"
FIXTURE = REPO / "tests" / "fixtures" / "sgl_kernel_fixture"
VENV = "/opt/sglang/venv"
WORK = "/opt/sglang/build/sgl-kernel"
STAMP = f"{VENV}/.sglang-lxc/sgl-kernel.json"
LAUNCHER_DIR = "/var/tmp/sgl-kernel-launcher"
# Filled by the ct fixture: the dependency repositories and the controller's source cache.
SOURCES: dict = {}


def fixture_vars(**overrides) -> dict:
    base = {
        "sglang_kernel_git_url_rewrites": SOURCES["rewrites"],
        "sglang_kernel_source_cache_dir": SOURCES["cache"],
        "sglang_stack_enabled": False,
        "sglang_kernel_from_source": True,
        "sglang_kernel_source_dir": str(FIXTURE),
        "sglang_kernel_source_subdir": "",
        "sglang_kernel_build_requirements_file": str(FIXTURE / "build-requirements.txt"),
        "sglang_kernel_build_poll": 3,
        # 2 CPUs and ~4 GiB in a lab container: (avail - 0.5) / 0.5 >= 2, so the CPUs bind.
        "sglang_kernel_build_per_thread_gb": 0.5,
        "sglang_kernel_build_reserve_gb": 0.5,
        "sglang_kernel_build_slot": "lab",
        "sglang_kernel_build_env": {
            "CMAKE_CUDA_COMPILER_LAUNCHER": f"{WORK}/src/tools/launcher.sh",
            "CMAKE_CXX_COMPILER_LAUNCHER": f"{WORK}/src/tools/launcher.sh",
            "FIXTURE_LAUNCHER_DIR": LAUNCHER_DIR,
        },
    }
    base.update(overrides)
    if "variant" in base:
        base["sglang_kernel_extra_cmake_args"] = [f"-DFIXTURE_VARIANT={base.pop('variant')}"]
    return base


def sh(ct, command: str, check: bool = True) -> str:
    return ct.exec("sh", "-c", command, check=check).stdout.strip()


def build_info(ct) -> dict:
    return json.loads(
        sh(
            ct,
            f"{VENV}/bin/python -c 'import json, sgl_kernel; "
            "print(json.dumps(sgl_kernel.build_info()))'",
        )
    )


def stamp(ct) -> dict:
    return json.loads(sh(ct, f"cat {STAMP}"))


def reset_launcher(ct) -> None:
    sh(ct, f"rm -rf {LAUNCHER_DIR}")


def max_concurrent(ct) -> int:
    return int(sh(ct, f"cat {LAUNCHER_DIR}/max"))


def compile_times(ct) -> dict[str, tuple[int, int]]:
    """{output: (start, end)} of each compile of the configured build.ninja (the check's
    configured.json), as ninja recorded them in its .ninja_log (v5+: start end mtime output
    hash, ms since that ninja started): the latest entry of each output."""
    outputs = set(json.loads(sh(ct, f"cat {WORK}/configured.json"))["compile_outputs"])
    times = {}
    for line in sh(ct, f"cat {WORK}/build/.ninja_log").splitlines():
        fields = line.split("\t")
        if not line.startswith("#") and len(fields) >= 4 and fields[3] in outputs:
            times[fields[3]] = (int(fields[0]), int(fields[1]))
    return times


def most_at_once(intervals) -> int:
    """The most intervals open at one time (one ending as another starts: not both)."""
    events = sorted([(start, 1) for start, _ in intervals] + [(end, -1) for _, end in intervals])
    most = running = 0
    for _, step in events:
        running += step
        most = max(most, running)
    return most


@pytest.fixture(scope="module")
def ct(lab_container, tmp_path_factory):
    repos = tmp_path_factory.mktemp("kernel-deps")
    make_dep_repos(repos)
    SOURCES.update(rewrites=url_rewrites(repos), cache=str(tmp_path_factory.mktemp("sources")))
    # 4 GiB, not the lab's 7 GiB default (sized for two CPU SGLang instances): the caps these tests
    # expect are computed from the memory the container has
    ct = lab_container(VMID, memory=4096)
    result = ct.run_playbook("playbooks/toolchain.yml")
    assert result.rc == 0, str(result)
    return ct


def test_bad_input_fails_before_any_change(ct):
    for extra, name in [
        ({"sglang_version": "0.0.99"}, "sglang_version"),
        ({"sglang_kernel_nvcc_threads": 0}, "sglang_kernel_nvcc_threads"),
        ({"sglang_kernel_build_reserve_gb": -1}, "sglang_kernel_build_reserve_gb"),
        ({"sglang_kernel_source_dir": "/nonexistent"}, "sglang_kernel_source_dir"),
        # no mirror: the dependency is named with its repository, commit and cache folder
        (
            {"sglang_kernel_git_url_rewrites": {}},
            "https://git.invalid/sglang-lxc-fixture/fixture-headers.git at 6fe729b7",
        ),
    ]:
        result = ct.run_playbook(PLAYBOOK, extra_vars=fixture_vars(**extra))
        assert result.rc != 0, str(result)
        assert name in result.output, str(result)
        assert result.changed == 0, str(result)
    assert sh(ct, f"test -e {VENV} && echo yes || echo no") == "no"


def test_converge_builds_with_the_cap(ct):
    reset_launcher(ct)
    result = ct.run_playbook(PLAYBOOK, extra_vars=fixture_vars())
    assert result.rc == 0, str(result)
    assert result.changed > 0
    # progress polls were shown, counting the 5 compiles of build.ninja, not ninja's first step
    assert re.search(r"sgl-kernel build on ct230 \(\S+\): compiled [0-5]/5", result.output)
    assert "objects compiled" not in result.output
    # the built library's cubins, read with the toolchain's cuobjdump (no GPU here: reported)
    assert "sgl_kernel cubins (cuobjdump; no GPU, reported only): " in result.output
    assert "sm100/common_ops sm_120a" in result.output
    jobs = stamp(ct)["build"]["jobs"]
    assert jobs == 2, stamp(ct)  # 2 CPUs in a lab container
    # the cap reached the build (ninja's -j through CMAKE_BUILD_PARALLEL_LEVEL)...
    log = sh(ct, f"cat {WORK}/build.log")
    assert f"sgl-kernel build: MAX_JOBS={jobs} CMAKE_BUILD_PARALLEL_LEVEL={jobs}\n" in log, log
    # ...and ninja ran that many compiles at once, never more: the start and end ninja
    # recorded for each (it starts all the jobs it may before it waits for one; the launcher
    # holds each compile 2 s), of this one build: the configuration was new, the tree empty
    times = compile_times(ct)
    print(f"kernel build: compiles ran (start, end ms) {sorted(times.values())}")
    assert len(times) == 5, times  # every compile of build.ninja, recorded
    assert most_at_once(times.values()) == jobs, times
    assert max_concurrent(ct) <= jobs  # the launcher, around the compiler itself, agrees
    info = build_info(ct)
    assert info["variant"] == 1
    # nvcc's own __CUDA_ARCH_LIST__: sm_120a alone, also in the dependency that sets 80 and 90
    assert (info["archs"], info["comm_archs"]) == ("1200", 1200)
    assert info["nvcc_threads"] == 1
    assert info["below_sm90"] == "OFF"
    assert info["numa_nodes"] >= 1  # the dependency that needs numa.h links libnuma
    assert (info["copies"], info["libraries"]) == (["sm100"], [])  # no sm90 copy, FA3, MLA
    configured = json.loads(sh(ct, f"cat {WORK}/configured.json"))
    assert configured["per_arch"] == {"sm_120a": 5}, configured  # 4 own sources + the dependency
    assert (configured["nvcc_commands"], configured["problems"]) == (5, [])
    left_out = stamp(ct)["inputs"]["source"]["left_out"]
    assert sorted(left_out) == ["common_ops_sm90_build", "fixture_mla_ops", "flash_ops"]
    no_fa3 = sh(ct, f"{VENV}/bin/python -c 'import sgl_kernel.flash_attn' 2>&1", check=False)
    assert "ImportError: FA3 (flash_ops) is not part of this sgl_kernel build" in no_fa3
    assert stamp(ct)["version"] == "0.0.1"


def test_a_configured_build_for_another_architecture_stops_before_compiling(ct):
    before = sh(ct, f"md5sum {STAMP}")
    # CMAKE_CUDA_FLAGS reaches every nvcc command: the check names it and nothing compiles
    result = ct.run_playbook(
        PLAYBOOK,
        extra_vars=fixture_vars(
            sglang_kernel_extra_cmake_args=[
                "-DCMAKE_CUDA_FLAGS=-gencode=arch=compute_90,code=sm_90"
            ]
        ),
    )
    assert result.rc != 0, str(result)
    log = sh(ct, f"cat {WORK}/build.log")
    assert "5 nvcc commands build architectures that were not asked for; nothing compiled" in log
    assert f"sm_90 (allowed: sm_120a); look at {WORK}/build/CMakeCache.txt:" in log
    assert "Building CUDA object" not in log
    assert sh(ct, f"md5sum {STAMP}") == before


def test_rerun_skips_the_build(ct):
    before = sh(ct, f"stat -c %Y {STAMP}")
    # an SM120 GPU (given, the lab has none): the build holds its architecture
    result = ct.run_playbook(
        PLAYBOOK, extra_vars=fixture_vars(sglang_kernel_gpu_compute_caps=["12.0"])
    )
    assert result.rc == 0, str(result)
    assert result.changed == 0, str(result)
    assert sh(ct, f"stat -c %Y {STAMP}") == before
    assert "sgl_kernel common_ops: sm_120a present (sm100/common_ops: " in result.output


def test_a_gpu_architecture_the_build_lacks_fails_naming_library_and_gpu(ct):
    """The check alone, with the toolchain's cuobjdump (nvidia-cuda-cuobjdump's wheel), for an
    H200 (9.0) beside the SM120-only build."""
    proc = subprocess.run(
        [str(VENV_BIN / "ansible"), ct.name, "-i", str(ct.inventory),
         "-m", "sglang_lxc.serving.sglang_kernel_cubins",
         "-a", json.dumps({"python": f"{VENV}/bin/python", "cuda_env_file": "/etc/sglang/cuda.env",
                           "gpu_compute_caps": ["9.0"]})],
        cwd=REPO, env=lab_env(), capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    flat = " ".join(proc.stdout.replace("''", "'").split())  # YAML's quoting undone
    assert proc.returncode != 0, flat
    assert (
        "sgl_kernel: the GPU's sm_90 is in no common_ops library: sm100/common_ops holds sm_120a"
    ) in flat
    assert "/opt/sglang/cuda/current/nvidia/cu13/bin/cuobjdump" in flat


def test_check_mode_changes_nothing(ct):
    before = sh(ct, f"md5sum {STAMP}")
    result = ct.run_playbook(PLAYBOOK, extra_vars=fixture_vars(variant=2), check=True)
    assert result.rc == 0, str(result)
    assert sh(ct, f"md5sum {STAMP}") == before
    assert build_info(ct)["variant"] == 1


def test_killed_build_leaves_the_previous_version(ct):
    before = sh(ct, f"md5sum {STAMP}")
    old_pid = sh(ct, f"cat {WORK}/build.pid")
    cmd = [
        str(VENV_BIN / "ansible-playbook"),
        "-i",
        str(ct.inventory),
        str(REPO / PLAYBOOK),
        "--limit",
        ct.name,
        "-e",
        json.dumps(fixture_vars(variant=2)),
    ]
    proc = subprocess.Popen(
        cmd, cwd=REPO, env=lab_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )
    try:
        deadline = time.monotonic() + 600
        while time.monotonic() < deadline:
            pid = sh(ct, f"cat {WORK}/build.pid 2>/dev/null", check=False)
            if (
                pid
                and pid != old_pid
                and "Building CUDA object"
                in sh(ct, f"cat {WORK}/build.log 2>/dev/null", check=False)
            ):
                break
            time.sleep(1)
        else:
            pytest.fail("the build never started compiling")
        sh(ct, f"kill -s TERM -- -{int(pid)}")
        output, _ = proc.communicate(timeout=300)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode != 0, output
    assert "stopped without an exit status" in output
    assert sh(ct, f"md5sum {STAMP}") == before
    assert build_info(ct)["variant"] == 1  # the previous wheel still imports
    # the next test builds variant 2 again from the build folder the killed build left


def test_changed_flag_rebuilds_under_a_memory_bound_cap(ct):
    reset_launcher(ct)
    # After the killed build of the same flag (the test above): the rerun recovers from what it
    # left, and floor((~3.5 GiB - 0) / 3 GiB) = 1 job: memory binds, compiles run one at a time.
    result = ct.run_playbook(
        PLAYBOOK,
        extra_vars=fixture_vars(
            variant=2, sglang_kernel_build_per_thread_gb=3, sglang_kernel_build_reserve_gb=0
        ),
    )
    assert result.rc == 0, str(result)
    assert stamp(ct)["build"]["jobs"] == 1
    assert stamp(ct)["build"]["limited_by"] in ("memory", "floor")
    assert max_concurrent(ct) == 1
    assert build_info(ct)["variant"] == 2


def test_infra_checks_pass(ct):
    proc = ct.testinfra("tests/infra/test_sglang.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # checked, not skipped (a module whose deploy record says "skipped" exits 0 too)
    assert " passed" in proc.stdout and "failed" not in proc.stdout, proc.stdout
