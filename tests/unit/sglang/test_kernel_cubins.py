"""The installed sgl_kernel's cubin architectures (plugins/module_utils/sglang_kernel_cubins.py,
the module's whole logic): what
``cuobjdump --list-elf`` prints (the lines below are its output on the lock's sglang-kernel
0.4.2.post2, nvidia-cuda-cuobjdump 13.2.86), and the verdict for a GPU. The lab runs the module
with the toolchain's cuobjdump (tests/integration/sglang/test_kernel_build_lab.py).
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.module_utils import json_cache
from ansible_collections.sglang_lxc.serving.plugins.module_utils import (
    sglang_kernel_cubins as cubins,
)

ARCHS = ["sm_90", "sm_80", "sm_89", "sm_100a", "sm_120a", "sm_103a", "sm_90a"]


def listing(stem: str, archs: list[str], per_arch: int) -> str:
    lines, n = [], 0
    for _ in range(per_arch):
        for arch in archs:
            n += 1
            lines.append(f"ELF file {n:>4}: {stem}.{n}.{arch}.cubin")
    return "\n".join(lines) + "\n"


def lock_wheel() -> dict:
    return {
        "sm100/common_ops": cubins.list_elf(listing("common_ops.abi3", ARCHS, 56)),
        "sm90/common_ops": cubins.list_elf(listing("common_ops.abi3", ARCHS, 56)),
        "flash_ops": cubins.list_elf(listing("flash_ops.abi3", ["sm_80", "sm_86", "sm_90a"], 3)),
        "spatial_ops": cubins.list_elf(listing("spatial_ops.abi3", ARCHS, 1)),
    }


def test_list_elf_counts_cubins_per_architecture():
    text = (
        "ELF file    1: common_ops.abi3.1.sm_90.cubin\n"
        "ELF file    2: common_ops.abi3.2.sm_120a.cubin\n"
    )
    assert cubins.list_elf(text) == {"sm_90": 1, "sm_120a": 1}
    assert cubins.list_elf(listing("common_ops.abi3", ARCHS, 56))["sm_120a"] == 56
    assert cubins.list_elf("cuobjdump info    : File 'x' does not contain device code") == {}
    assert cubins.SUFFIX.sub("", "sm100/common_ops.abi3.so") == "sm100/common_ops"
    assert cubins.SUFFIX.sub("", "_mscclpp.cpython-310-x86_64-linux-gnu.so") == "_mscclpp"
    assert cubins.gpu_arch("12.0") == "sm_120" and cubins.gpu_arch("9.0") == "sm_90"


def test_the_lock_wheel_on_sm120_has_its_architecture():
    verdict = cubins.judge(lock_wheel(), ["sm_120"], ["common_ops"], "sgl_kernel")
    assert verdict["problems"] == []
    assert verdict["summary"] == (
        "sgl_kernel common_ops: sm_120a present (sm100/common_ops: 56 cubins, "
        "sm90/common_ops: 56 cubins)"
    )


def test_a_gpu_architecture_no_common_ops_holds_fails_naming_library_and_gpu():
    sm120_only = {"sm100/common_ops": {"sm_120a": 64}, "spatial_ops": {"sm_120a": 1}}
    verdict = cubins.judge(sm120_only, ["sm_90"], ["common_ops"], "sgl_kernel")
    assert verdict["problems"] == [
        "sgl_kernel: the GPU's sm_90 is in no common_ops library: sm100/common_ops holds sm_120a "
        "(cuobjdump --list-elf)"
    ]
    mixed = cubins.judge(sm120_only, ["sm_120", "sm_90"], ["common_ops"], "sgl_kernel")
    assert mixed["summary"].startswith("sgl_kernel common_ops: sm_120a present")
    assert len(mixed["problems"]) == 1


def test_without_a_gpu_it_reports_every_library():
    verdict = cubins.judge(lock_wheel(), [], ["common_ops"], "sgl_kernel")
    assert verdict["problems"] == []
    assert verdict["summary"].startswith(
        "sgl_kernel cubins (cuobjdump; no GPU, reported only): flash_ops sm_80 sm_86 sm_90a; "
        "sm100/common_ops sm_80 sm_89 sm_90 sm_90a sm_100a sm_103a sm_120a;"
    )


def test_a_listing_is_kept_for_the_same_files_and_read_again_for_new_ones(tmp_path):
    """A rerun over the same install reads no library again; a reinstalled library (new inode,
    size or mtime) or another cuobjdump is read afresh."""
    lib = tmp_path / "pkg" / "common_ops.abi3.so"
    lib.parent.mkdir()
    lib.write_bytes(b"\x7fELF one")
    tool = tmp_path / "cuobjdump"
    tool.write_text("#!/bin/sh\n")
    cache = tmp_path / "cache"
    key = cubins.identity([str(lib)], str(tool))
    assert json_cache.read(str(cache), key) is None
    listing_ = {"common_ops": {"sm_120a": 56}}
    json_cache.keep(str(cache), key, listing_)
    assert json_cache.read(str(cache), key) == listing_
    assert oct((cache).stat().st_mode & 0o777) == "0o700"
    assert cubins.identity([str(lib)], str(tool)) == key  # the same files: the same key
    new = lib.with_suffix(".new")
    new.write_bytes(b"\x7fELF two")
    new.replace(lib)  # reinstalled the way an install does: another inode, size, mtime
    assert cubins.identity([str(lib)], str(tool)) != key
    assert json_cache.read("", key) is None  # "" turns the cache off


def test_answer_reads_a_venvs_package_with_a_cuobjdump_then_from_the_cache(tmp_path):
    """The module's whole run (what its action runs bare on the target): the package found in
    the venv's site-packages without starting its Python, each library listed by the cuobjdump
    that the env file's CUDA_HOME names, the second run from the cache; a GPU no library
    holds fails."""
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages" / "sgl_kernel"
    (site / "sm100").mkdir(parents=True)
    (site / "__init__.py").write_text("")
    (site / "sm100" / "common_ops.abi3.so").write_bytes(b"\x7fELF")
    calls = tmp_path / "calls"
    home = tmp_path / "cuda"
    (home / "bin").mkdir(parents=True)
    tool = home / "bin" / "cuobjdump"
    tool.write_text(f"#!/bin/sh\necho \"$@\" >> {calls}\n"
                    "echo 'ELF file    1: common_ops.abi3.1.sm_120a.cubin'\n")
    tool.chmod(0o755)
    env = tmp_path / "cuda.env"
    env.write_text(f"CUDA_HOME={home}\n")
    args = {"python": str(tmp_path / "venv" / "bin" / "python"), "cuda_env_file": str(env),
            "cache_dir": str(tmp_path / "cache")}
    first = cubins.answer(**args)
    assert first["libraries"] == {"sm100/common_ops": {"sm_120a": 1}}
    assert first["cached"] is False and first["cuobjdump"] == str(tool)
    assert "failed" not in first and "no GPU, reported only" in first["summary"]
    again = cubins.answer(**args)
    assert again["cached"] is True and again["libraries"] == first["libraries"]
    assert len(calls.read_text().splitlines()) == 1  # the second run read no library
    wrong = cubins.answer(**args, gpu_compute_caps=["9.0"])
    assert wrong["failed"] is True and "sm_90 is in no common_ops library" in wrong["msg"]
    assert cubins.answer(**{**args, "python": str(tmp_path / "none" / "bin" / "python")}) == {
        "changed": False, "libraries": {}, "gpu_archs": [], "cuobjdump": "",
        "summary": f"sgl_kernel is not installed in {tmp_path / 'none'}"}
