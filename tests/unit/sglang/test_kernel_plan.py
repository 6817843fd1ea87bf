"""The sgl-kernel build decision and install (plugins/action/sglang_kernel_plan.py,
sglang_kernel_build.py, plugins/modules/sglang_kernel_probe.py): the parts that run without a
target. tests/integration/sglang/test_kernel_build_lab.py runs them for real on a container.
"""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.loaders import ROOT, load_file

kplan = load_file("sglang_kernel_plan_action", ROOT / "plugins/action/sglang_kernel_plan.py")
kbuild = load_file("sglang_kernel_build_action", ROOT / "plugins/action/sglang_kernel_build.py")
probe = load_file("sglang_kernel_probe_module", ROOT / "plugins/modules/sglang_kernel_probe.py")

FIXTURE = ROOT / "tests" / "fixtures" / "sgl_kernel_fixture"
GIB = 1024**3
SHELL_TREE_ID = (
    "find . -type f ! -path './build/*' ! -path './dist/*' ! -path './.git/*' ! -name '*.pyc' "
    "-print0 | LC_ALL=C sort -z | xargs -0 -r sha256sum | sha256sum | cut -c1-40"
)

ARGS = {
    "cmake_args": ["-DENABLE_BELOW_SM90=OFF", "-DSGL_KERNEL_ENABLE_FA3=OFF"],
    "extra_cmake_args": [],
    "nvcc_threads": 1,
    "cuda_archs": ["12.0"],
    "build_env": {},
    "ccache_dir": "",
    "cuda_env_file": "/etc/sglang/cuda.env",
    "per_thread_gb": 4,
    "reserve_gb": 4,
    "max_jobs": 0,
}
PROBE = {
    "nvcc": "Build cuda_13.0.r13.0/compiler.36424714_0",
    "python": "3.11.2",
    "torch": "2.9.1",
    "installed": None,
    "stamp": {},
    "source_tree": "",
}
PATHS = {
    "python": "/opt/sglang/venv/bin/python",
    "src": "/opt/sglang/build/sgl-kernel/src",
    "work_dir": "/opt/sglang/build/sgl-kernel",
    "stamp_file": "/opt/sglang/venv/.sglang-lxc/sgl-kernel.json",
    "cache_dir": "/root/.cache/sglang-lxc/sources",
    "source_tree": "/src/sgl-kernel",
}
SOURCE = {"folder": "/src/sgl-kernel", "tree": "a" * 40}
RESOURCES = {"cpus": 16, "mem_available_bytes": 64 * GIB}


def shell_tree_id(path: Path) -> str:
    return subprocess.run(
        ["bash", "-o", "pipefail", "-c", SHELL_TREE_ID],
        cwd=path,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()


def make(args=None, probe_=None, source=None, resources=None):
    return kplan.plan(
        {**ARGS, **(args or {})},
        source or SOURCE,
        {**PROBE, **(probe_ or {})},
        resources or RESOURCES,
        PATHS,
    )


def installed_stamp(result, version="0.0.1"):
    """The stamp sglang_kernel_build writes after installing, read back as JSON."""
    wheel = f"/w/dist/sglang_kernel-{version}-cp311-abi3-linux_x86_64.whl"
    stamp = kbuild.stamp_of(result["inputs"], wheel, result["cap"], 12.5)
    return json.loads(json.dumps(stamp, indent=4, sort_keys=True))


# ------------------------------------------------------------------------------ source identity


def test_folder_identity_is_the_shell_pipelines_figure(tmp_path):
    tree = tmp_path / "tree"
    shutil.copytree(FIXTURE, tree)
    for skipped in ("build/x.o", "dist/a.whl", ".git/HEAD", "pkg/__pycache__/m.cpython-311.pyc"):
        (tree / skipped).parent.mkdir(parents=True, exist_ok=True)
        (tree / skipped).write_text("ignored\n")
    (tree / "csrc" / "build").mkdir(parents=True)
    (tree / "csrc" / "build" / "kept.cu").write_text("// only the top build/ is skipped\n")
    (tree / "Zed").write_text("upper case sorts first in C order\n")
    expected = kplan.folder_tree_id(str(tree))
    assert expected == shell_tree_id(tree)  # stamps written by the old tasks stay valid
    (tree / "build" / "x.o").write_text("changed build output\n")
    assert kplan.folder_tree_id(str(tree)) == expected
    (tree / "csrc" / "build" / "kept.cu").write_text("// changed\n")
    assert kplan.folder_tree_id(str(tree)) != expected


def test_git_identity_is_the_subdirs_tree(tmp_path):
    repo = tmp_path / "repo"
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "sgl-kernel").mkdir()
    (repo / "sgl-kernel" / "setup.py").write_text("x = 1\n")
    (repo / "other").write_text("y\n")
    subprocess.run([*git, "add", "."], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    want = subprocess.run(
        [*git, "rev-parse", "HEAD:sgl-kernel"], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert kplan.git_tree_id(str(repo), "sgl-kernel/") == (want, "")
    root, _ = kplan.git_tree_id(str(repo), "")
    assert len(root) == 40 and root != want
    tree, error = kplan.git_tree_id(str(tmp_path / "no-clone"), "sgl-kernel")
    assert tree == "" and error


# ------------------------------------------------------------------------------ the decision


def test_first_run_builds_with_the_flags_and_the_cap():
    result = make()
    assert result["build"] and result["reason"] == "no stamp of an installed build"
    assert result["inputs"]["cmake_args"][-1] == "-DSGL_KERNEL_COMPILE_THREADS=1"
    # 64 GiB - 4 reserved, 4 GiB per nvcc thread: 15 jobs, 16 CPUs: memory binds
    assert (result["cap"]["jobs"], result["cap"]["limited_by"]) == (15, "memory")
    env = result["environment"]
    assert env["MAX_JOBS"] == env["CMAKE_BUILD_PARALLEL_LEVEL"] == "15"
    assert env["TORCH_CUDA_ARCH_LIST"] == "12.0"
    assert env["CMAKE_ARGS"] == " ".join(result["inputs"]["cmake_args"])
    assert env["SGLK_SRC"] == PATHS["src"] and env["SGLK_CUDA_ENV"] == ARGS["cuda_env_file"]
    assert "CCACHE_DIR" not in env
    assert result["dirs"] == [PATHS["work_dir"], "/opt/sglang/venv/.sglang-lxc"]
    assert result["archive"] == f"{PATHS['cache_dir']}/sgl-kernel-{'a' * 40}.tar.gz"
    assert not result["source_current"]


def test_the_installed_stamp_skips_the_next_build():
    stamp = installed_stamp(make())
    assert stamp["version"] == "0.0.1" and stamp["build"]["jobs"] == 15
    again = make(probe_={"stamp": stamp, "installed": "0.0.1", "source_tree": "a" * 40})
    assert not again["build"], again["reason"]
    assert again["source_current"]
    # the cap follows free memory, which moves between runs: not part of the stamp
    less = make(
        probe_={"stamp": stamp, "installed": "0.0.1"},
        resources={"cpus": 2, "mem_available_bytes": 6 * GIB},
    )
    assert not less["build"] and less["cap"]["jobs"] == 1


@pytest.mark.parametrize(
    ("change", "reason"),
    [
        ({"args": {"extra_cmake_args": ["-DFIXTURE_VARIANT=2"]}}, "inputs changed: cmake_args"),
        ({"args": {"nvcc_threads": 2}}, "inputs changed: cmake_args"),
        ({"args": {"cuda_archs": [12.0, "10.0"]}}, "inputs changed: cuda_archs"),
        ({"args": {"build_env": {"CC": "clang"}}}, "inputs changed: env"),
        ({"args": {"ccache_dir": "/var/cache/ccache"}}, "inputs changed: ccache"),
        ({"probe_": {"torch": "2.10.0"}}, "inputs changed: toolchain"),
        ({"source": {"folder": "/src/sgl-kernel", "tree": "b" * 40}}, "inputs changed: source"),
        ({"probe_": {"installed": "0.3.9"}}, "installed 0.3.9, the stamp says 0.0.1"),
        ({"probe_": {"installed": None}}, "installed nothing, the stamp says 0.0.1"),
        ({"source": {"git": "u", "ref": "v1", "subdir": "", "tree": ""}}, "identity is unknown"),
    ],
)
def test_what_triggers_a_build(change, reason):
    stamp = installed_stamp(make())
    probe_ = {"stamp": stamp, "installed": "0.0.1", **change.get("probe_", {})}
    result = make(args=change.get("args"), probe_=probe_, source=change.get("source"))
    assert result["build"]
    assert reason in result["reason"]


def test_build_env_wins_and_ccache_sets_the_launchers():
    result = make(
        args={
            "ccache_dir": "/var/cache/ccache",
            "build_env": {"CMAKE_CUDA_COMPILER_LAUNCHER": "/x/launcher.sh", "N": 3},
        }
    )
    env = result["environment"]
    assert env["CCACHE_DIR"] == "/var/cache/ccache"
    assert env["CMAKE_CXX_COMPILER_LAUNCHER"] == "ccache"
    assert env["CMAKE_CUDA_COMPILER_LAUNCHER"] == "/x/launcher.sh"
    assert env["N"] == "3"
    assert "/var/cache/ccache" in result["dirs"]


def test_the_config_id_ignores_the_source():
    one = make()["environment"]["SGLK_CONFIG_ID"]
    other_source = make(source={"folder": "/elsewhere", "tree": "c" * 40})
    assert other_source["environment"]["SGLK_CONFIG_ID"] == one
    assert make(args={"nvcc_threads": 2})["environment"]["SGLK_CONFIG_ID"] != one


def test_an_override_and_bad_knobs():
    assert make(args={"max_jobs": 3})["cap"]["limited_by"] == "override"
    with pytest.raises(kplan._caps.AnsibleFilterError, match="sglang_kernel_nvcc_threads"):
        make(args={"nvcc_threads": 0})


# ------------------------------------------------------------------------------ the install


def test_wheel_version_and_install_command():
    wheel = "/w/dist/sglang_kernel-0.3.21-cp310-abi3-manylinux2014_x86_64.whl"
    assert kbuild.wheel_version(wheel) == "0.3.21"
    with pytest.raises(ValueError, match="not a wheel"):
        kbuild.wheel_version("/w/dist/sglang_kernel-0.3.21.tar.gz")
    argv = kbuild.install_command("/v/bin/python", wheel)
    assert argv[:4] == ["/v/bin/python", "-m", "pip", "install"]
    assert {"--no-deps", "--no-index", "--force-reinstall"} <= set(argv)
    assert argv[-1] == wheel


# ------------------------------------------------------------------------------ the probe module


def test_probe_parses_nvcc_and_reads_files(tmp_path):
    out = "nvcc: NVIDIA (R) Cuda compiler driver\nBuild cuda_13.0.r13.0/compiler.1_0\n\n"
    assert probe.nvcc_version(out) == "Build cuda_13.0.r13.0/compiler.1_0"
    assert probe.nvcc_version("") == "none"
    (tmp_path / "stamp.json").write_text('{"version": "0.0.1"}')
    (tmp_path / "bad.json").write_text("{not json")
    assert probe.read_json(str(tmp_path / "stamp.json")) == {"version": "0.0.1"}
    assert probe.read_json(str(tmp_path / "bad.json")) == {}
    assert probe.read_json(str(tmp_path / "missing.json")) == {}
    (tmp_path / "marker").write_text("abc\n")
    assert probe.read_text(str(tmp_path / "marker")) == "abc"
    assert probe.read_text(str(tmp_path / "missing")) == ""


def test_probe_asks_the_venvs_own_python():
    found = probe.venv_versions(sys.executable, "pytest")
    assert found["python"] == ".".join(str(n) for n in sys.version_info[:3])
    assert found["installed"] == pytest.__version__
    missing = probe.venv_versions("/nonexistent/bin/python", "pytest")
    assert missing == {"python": None, "torch": None, "installed": None}


def test_progress_counts_the_configured_compiles_from_ninjas_own_log(tmp_path):
    """Real ninja: its first step (a re-check like CMake's glob check) is not a compile; the
    progress counts the compiles the configured build.ninja holds, from .ninja_log."""
    units = ["csrc/gemm/fp8_gemm_kernel.cu", "csrc/elementwise/activation.cu", "csrc/moe/a.cu"]
    outputs = [f"CMakeFiles/common_ops_sm100_build.dir/{u}.o" for u in units]
    lines = [
        "rule recheck\n  command = sleep 0.05 && touch $out\n  description = Re-checking globbed",
        "rule cc\n  command = sleep 0.1 && touch $out",
        "build globs.stamp: recheck",
    ]
    lines += [f"build {o}: cc || globs.stamp" for o in outputs[:2]]  # the third not yet run
    (tmp_path / "build.ninja").write_text("\n".join(lines) + "\n")
    done = subprocess.run(
        ["ninja", "-j1", *outputs[:2]], cwd=tmp_path, capture_output=True, text=True, check=True
    )
    assert "[1/3] Re-checking globbed" in done.stdout  # what the old progress line counted
    log = (tmp_path / ".ninja_log").read_text()
    configured = {"nvcc_commands": 3, "compile_outputs": outputs}
    line = kbuild.compile_progress(configured, log, 2, done.stdout)
    assert re.match(r"compiled 2/3, last: csrc/elementwise/activation\.cu; \d+m\d\ds per unit",
                    line), line
    assert line.endswith("left at 2 job(s)")
    assert kbuild.compile_progress(configured, "# ninja log v5\n", 2, "") == (
        "compiled 0/3; first units running, no time per unit yet"
    )
    # before configure (no configured.json yet): the log's last line
    assert kbuild.compile_progress({}, "", 2, "-- Configuring done") == "last: -- Configuring done"
    full = log + "0\t714000\t0\t" + outputs[2] + "\tx\n"
    assert kbuild.compile_progress(configured, full, 2, "") == (
        "compiled 3/3, last: csrc/moe/a.cu; linking"
    )
    # the time per unit is measured: 714 s for the third (an fp8 GEMM's CPU time)
    two = log.replace(outputs[1], "other.o") + "0\t600000\t0\t" + outputs[1] + "\tx\n"
    assert "; 5m00s per unit, about 2m30s left at 2 job(s)" in kbuild.compile_progress(
        configured, two, 2, ""
    )
