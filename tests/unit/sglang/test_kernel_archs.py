"""The SM120-only transformation of sgl-kernel's build copy and the check of the configured build
(plugins/plugin_utils/sgl_kernel_archs.py and sgl_kernel_cmake.py; the check is the role's
roles/sglang/files/sgl_kernel_configured.py), on tests/fixtures/sgl_kernel_fixture, which keeps
the real tree's traits. A transformation that stops removing a gencode, the FA3 override or a
left-out target fails here in seconds; tests/integration/sglang/test_kernel_build_lab.py
configures and builds the result with CMake and nvcc, and checks the generated build.
"""

from __future__ import annotations

import hashlib
import re
import shutil
from pathlib import Path

import pytest
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import sgl_kernel_archs as archs
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import sgl_kernel_cmake as cmake

from tests.loaders import ROOT, load_file

configured = load_file("sgl_kernel_configured",
                       ROOT / "roles/sglang/files/sgl_kernel_configured.py")

FIXTURE = ROOT / "tests" / "fixtures" / "sgl_kernel_fixture"
OFF = ["ENABLE_BELOW_SM90", "SGL_KERNEL_ENABLE_FA3", "MSCCLPP_BUILD_PYTHON_BINDINGS"]


def digest(folder: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(folder.rglob("*")):
        if p.is_file():
            h.update(str(p.relative_to(folder)).encode() + p.read_bytes())
    return h.hexdigest()


@pytest.fixture
def copy(tmp_path) -> Path:
    dest = tmp_path / "build-copy"
    shutil.copytree(FIXTURE, dest)
    return dest


def live(root: Path):
    """(file, command) of every command CMake would still read in the build copy."""
    for rel in cmake.build_files(str(root)):
        for cmd in cmake.parse_commands((root / rel).read_text(), rel):
            yield rel, cmd


def live_gencodes(root: Path) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for _, cmd in live(root):
        vals = cmd.values()
        if cmd.name not in ("set", "list") or len(vals) < 2:
            continue
        var = vals[0] if cmd.name == "set" else vals[1]
        for v in vals:
            if "gencode" in v or "compute_" in v:
                out.setdefault(var, []).append(v)
    return out


def test_sm120_only_build_copy_of_the_fixture(copy):
    before = digest(FIXTURE)
    record = archs.transform(str(copy), ["12.0"], OFF)
    assert digest(FIXTURE) == before  # the transformation works on the copy only

    assert record["archs"] == ["sm_120a"]
    left = {t["target"]: t["reason"] for t in record["left_out"]}
    assert set(left) == {"common_ops_sm90_build", "flash_ops", "fixture_mla_ops"}
    assert "sm90 copy" in left["common_ops_sm90_build"]
    assert left["flash_ops"] == "builds only sm_80, sm_86, sm_90a"
    assert record["not_included"] == ["cmake/mla.cmake"]

    # what CMake will read: one gencode, the asked one, in the kept targets' flags
    gens = live_gencodes(copy)
    assert gens["FIXTURE_CUDA_FLAGS"] == ["-gencode=arch=compute_120a,code=sm_120a"]
    assert set(gens) <= {"FIXTURE_CUDA_FLAGS", "FIXTURE_FLASH_CUDA_FLAGS"}  # FA3's: target gone
    defined = {cmd.values()[0] for _, cmd in live(copy) if cmd.name in archs.TARGET_COMMANDS}
    assert defined == {"common_ops_sm100_build"}
    fa3_on = [
        f"{rel}:{cmd.line}"
        for rel, cmd in live(copy)
        if cmd.name == "set" and cmd.values()[:1] == ["SGL_KERNEL_ENABLE_FA3"]
    ]
    assert fa3_on == []
    installs = [cmd.values() for _, cmd in live(copy) if cmd.name == "install"]
    assert installs == [
        ["TARGETS", "common_ops_sm100_build", "LIBRARY", "DESTINATION", "sgl_kernel/sm100"]
    ]
    # the copy keeps the tree's line numbers (a message names a line of either)
    assert len((copy / "CMakeLists.txt").read_text().split("\n")) == len(
        (FIXTURE / "CMakeLists.txt").read_text().split("\n")
    )
    # dependencies built with add_subdirectory get the asked architecture through our helper
    assert record["cmake_args"] == {
        "CMAKE_PROJECT_TOP_LEVEL_INCLUDES": f"cmake/{archs.HELPER}",
        "SGLANG_LXC_CUDA_ARCHS": "120a-real",
    }
    assert (copy / "cmake" / archs.HELPER).is_file()


def test_the_build_copy_reads_only_the_pins_of_kept_files(copy):
    archs.transform(str(copy), ["12.0"], OFF)
    pins = cmake.read_pins(str(copy), cmake.build_files(str(copy)))
    assert [(p.name, p.ref, p.subdirectory) for p in pins] == [
        ("repo-fixture-headers", "6fe729b718d3227dfa45e9967d1169feba33009c", False),
        ("repo-fixture-comm", "8319e0af6b312c5460747d114474e801c378a8ef", True),
    ]
    # the untransformed tree also needs the MLA file's pin
    assert "repo-fixture-mla" in {p.name for p in cmake.read_pins(str(FIXTURE))}
    nested = cmake.read_pins(
        str(ROOT / "tests/fixtures/sgl_kernel_fixture_deps/fixture-comm"),
        parent="repo-fixture-comm",
    )
    assert [(p.name, p.git, p.where()) for p in nested] == [
        (
            "fixture-config",
            ("https://git.invalid/sglang-lxc-fixture/fixture-config.git", "v1.0"),
            "repo-fixture-comm: CMakeLists.txt:16",
        )
    ]


def test_other_architectures_keep_other_targets(copy):
    record = archs.transform(str(copy), ["10.0"], OFF)
    assert record["archs"] == ["sm_100a"]
    assert {t["target"] for t in record["left_out"]} == {"common_ops_sm90_build", "flash_ops"}


MUTATIONS = [
    (
        '"-gencode=arch=compute_90,code=sm_90"',
        '"--generate-code=arch=compute_90,code=[sm_90]"',
        "CMakeLists.txt:50: '--generate-code=arch=compute_90,code=[sm_90]' names an architecture",
    ),
    (
        "set(CMAKE_POSITION_INDEPENDENT_CODE ON)",
        "set(CMAKE_CUDA_ARCHITECTURES 90)",
        "CMakeLists.txt:17: the tree sets CMAKE_CUDA_ARCHITECTURES",
    ),
    (
        '"-gencode=arch=compute_120a,code=sm_120a"',
        '"-gencode=arch=compute_121a,code=sm_121a"',
        "CMakeLists.txt:50: the tree builds no gencode for 12.0 (sm_120)",
    ),
]


@pytest.mark.parametrize(("old", "new", "message"), MUTATIONS)
def test_a_tree_that_no_longer_matches_fails_naming_file_and_line(copy, old, new, message):
    path = copy / "CMakeLists.txt"
    assert old in path.read_text()
    path.write_text(path.read_text().replace(old, new, 1))
    with pytest.raises(archs.TransformError) as err:
        archs.transform(str(copy), ["12.0"], OFF)
    assert str(err.value).startswith(message), str(err.value)


def test_bad_arch_names_the_variable():
    with pytest.raises(archs.TransformError, match="sglang_kernel_cuda_archs: 'sm120'"):
        archs.arch_number("sm120")


# -------------------------------------------------------------------------- the configured build

NINJA = """\
# CMAKE generated file: DO NOT EDIT!
include rules.ninja

build CMakeFiles/ops.dir/csrc/a.cu.o: CUDA_COMPILER__ops_unscanned_Release /src/csrc/a.cu || x
  FLAGS = -O3 -Xcompiler=-fPIC -gencode=arch=compute_120a,code=sm_120a --threads=1
  INCLUDES = -I/src/include
build CMakeFiles/ops.dir/csrc/b.cu.o: CUDA_COMPILER__ops_unscanned_Release /src/csrc/b.cu
  FLAGS = -gencode=arch=compute_120a,code=sm_120a $
      -gencode=arch=compute_90a,code=sm_90a
build dep/comm.cu.o: CUDA_COMPILER__dep_unscanned_Release /dep/comm.cu
  FLAGS = --generate-code=arch=compute_80,code=[compute_80,sm_80]
build dep/plain.cu.o: CUDA_COMPILER__dep_unscanned_Release /dep/plain.cu
  FLAGS = -O2
build CMakeFiles/ops.dir/csrc/c.cc.o: CXX_COMPILER__ops_unscanned_Release /src/csrc/c.cc
  FLAGS = -O3
"""
RULES = """\
rule CUDA_COMPILER__ops_unscanned_Release
  depfile = $DEP_FILE
  command = ${LAUNCHER}${CODE_CHECK}/opt/cuda/bin/nvcc -forward-unknown-to-host-compiler $DEFINES $INCLUDES $FLAGS -MD -MT $out -MF $DEP_FILE -x cu -c $in -o $out
rule CUDA_COMPILER__dep_unscanned_Release
  command = ${LAUNCHER}/opt/cuda/bin/nvcc $DEFINES $FLAGS -x cu -c $in -o $out
rule CXX_COMPILER__ops_unscanned_Release
  command = /usr/bin/c++ $FLAGS -c $in -o $out
"""  # noqa: E501


def test_the_check_counts_and_names_what_was_not_asked_for(tmp_path):
    (tmp_path / "build").mkdir()
    (tmp_path / "build" / "build.ninja").write_text(NINJA)
    (tmp_path / "build" / "rules.ninja").write_text(RULES)
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text('set(F\n  "-gencode=arch=compute_90a,code=sm_90a"\n)\n')
    result = configured.check(str(tmp_path / "build"), ["sm_120a"], [str(src)])
    assert (result["nvcc_commands"], result["compiles"]) == (4, 4)
    assert result["per_arch"] == {"sm_120a": 2, "sm_80": 1, "sm_90a": 1}
    assert result["problems"] == [
        "CMakeFiles/ops.dir/csrc/b.cu.o: sm_90a (allowed: sm_120a); "
        f"look at {src}/CMakeLists.txt:2",
        "dep/comm.cu.o: sm_80 (allowed: sm_120a); look at (no CMake file names it: "
        "CMAKE_CUDA_ARCHITECTURES?)",
        "dep/plain.cu.o: nvcc without an architecture flag (nvcc's default)",
    ]
    assert configured.main(["--build-dir", str(tmp_path / "build"), "--allow", "sm_120a"]) == 1


def test_compile_counts_per_clause():
    assert configured.archs_of(
        "nvcc -gencode=arch=compute_90,code=sm_90 -gencode arch=compute_100a,code=sm_100a "
        "--generate-code=arch=compute_120a,code=[compute_120a,sm_120a] -arch=sm_89"
    ) == ["sm_90", "sm_100a", "sm_120a", "sm_89"]


# ------------------------------------------------------------------------------ the reader


def test_the_reader_keeps_quotes_brackets_and_lines():
    text = 'set(A "x y" [[z\n(w)]] u\\ v) # c\n# set(B 1)\nif((A) AND B)\nendif()\n'
    cmds = cmake.parse_commands(text)
    assert [c.name for c in cmds] == ["set", "if", "endif"]
    assert cmds[0].values() == ["A", "x y", "z\n(w)", "u\\ v"]
    assert (cmds[1].line, cmds[2].line) == (4, 5)  # the bracket argument spans two lines
    with pytest.raises(cmake.CMakeReadError, match=r"f.cmake:1: 'set\(' is never closed"):
        cmake.parse_commands("set(A\n", "f.cmake")


def test_pins_with_variables_or_urls(tmp_path):
    gh = "https://github.com"
    (tmp_path / "CMakeLists.txt").write_text(
        f"FetchContent_Declare(json URL {gh}/nlohmann/json/releases/download/v3.11.3/json.tar.xz)\n"
        f"FetchContent_Declare(gt URL {gh}/google/googletest/archive/refs/tags/v1.14.0.zip)\n"
    )
    pins = cmake.read_pins(str(tmp_path))
    assert [p.git for p in pins] == [
        ("https://github.com/nlohmann/json", "v3.11.3"),
        ("https://github.com/google/googletest", "v1.14.0"),
    ]
    assert pins[0].cmake_name == "JSON"
    (tmp_path / "CMakeLists.txt").write_text(
        "FetchContent_Declare(x GIT_REPOSITORY u GIT_TAG ${T})"
    )
    expected = "CMakeLists.txt:1: FetchContent_Declare(x) uses a variable"
    with pytest.raises(cmake.CMakeReadError, match=re.escape(expected)):
        cmake.read_pins(str(tmp_path))
    assert cmake.fetchcontent_args({"repo-cutlass": "/w/deps/c"}) == [
        "-DFETCHCONTENT_FULLY_DISCONNECTED=ON",
        "-DFETCHCONTENT_SOURCE_DIR_REPO-CUTLASS=/w/deps/c",
    ]
