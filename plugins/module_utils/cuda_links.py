# Copyright: sglang-lxc contributors
# Apache-2.0
"""What a CUDA tree lacks to look like a classic toolkit to JIT builders (read-only planning).

Shared by the module cuda_toolkit_links (which applies the plan) and the probe state_probe
(which reports a non-empty plan as drift), so both judge a tree the same way.
"""

from __future__ import annotations

import filecmp
import os
import re

# The stub's name beside stubs/libcuda.so; the link says which one is in use.
STUB_NAME = "libcuda-sglang-lxc-stub.so"
# Driver API entry points in cuda.h: declarations, versioned aliases (cuMemAlloc -> _v2) and the
# per-thread variants (__CUDA_API_PTDS(cuMemcpy) -> cuMemcpy_ptds).
CUDA_H_DECLARED = re.compile(r"\bCUDAAPI\s+(cu[A-Za-z0-9_]+)\s*\(")
CUDA_H_ALIAS = re.compile(r"^\s*#\s*define\s+cu[A-Za-z0-9_]+\s+(cu[A-Za-z0-9_]+)\s*$", re.M)
CUDA_H_PER_THREAD = re.compile(r"__CUDA_API_PT(DS|SZ)\((cu[A-Za-z0-9_]+)\)")
# CUDA_ERROR_STUB_LIBRARY: what NVIDIA's own stub answers if it is ever loaded at run time.
STUB_ERROR = 34
LDCONFIG_LIBCUDA = re.compile(r"^\s*libcuda\.so\.1\s+\(([^)]*)\)\s+=>\s+(\S+)\s*$", re.M)

# libcudart.so.13 -> ("libcudart.so", "13"); libnvrtc-builtins.so.13.0 -> (..., "13.0")
VERSIONED_LIB = re.compile(
    r"^(lib[A-Za-z0-9_+\-]*(?:\.[A-Za-z_][A-Za-z0-9_+\-]*)*\.so)\.([0-9]+(?:\.[0-9]+)*)$"
)


def same_tree(left: str, right: str) -> bool:
    """True when two folders hold the same names and byte-identical files."""
    cmp = filecmp.dircmp(left, right)
    if cmp.left_only or cmp.right_only or cmp.funny_files:
        return False
    _match, mismatch, errors = filecmp.cmpfiles(left, right, cmp.common_files, shallow=False)
    if mismatch or errors:
        return False
    return all(same_tree(os.path.join(left, d), os.path.join(right, d)) for d in cmp.common_dirs)


def is_dangling(path: str) -> bool:
    return os.path.islink(path) and not os.path.exists(path)


class Plan:
    def __init__(self) -> None:
        self.links: list[tuple[str, str, bool]] = []  # (path, target, replaces_dangling)
        self.removals: list[str] = []
        self.kept: list[str] = []
        self.errors: list[str] = []


def plan_overlay(plan: Plan, include: str, headers: list[str]) -> None:
    cccl = os.path.join(include, "cccl")
    if not os.path.isdir(cccl):
        missing = [h for h in headers if not os.path.isdir(os.path.join(include, h))]
        if missing:
            plan.errors.append(
                f"CCCL headers not found: {cccl} does not exist "
                f"and {include} lacks {', '.join(missing)}"
            )
        return
    for name in headers:
        src = os.path.join(cccl, name)
        dst = os.path.join(include, name)
        target = os.path.join("cccl", name)
        if not os.path.isdir(src):
            plan.errors.append(f"CCCL folder {src} is missing: incomplete cccl wheel or toolkit")
            continue
        if os.path.islink(dst):
            if not os.path.exists(dst):
                plan.links.append((dst, target, True))
            elif os.path.realpath(dst) == os.path.realpath(src):
                plan.kept.append(dst)
            else:
                plan.errors.append(
                    f"refusing to replace {dst} -> {os.readlink(dst)}: it links to something "
                    f"other than {src}; remove it by hand if it is not needed"
                )
        elif os.path.isdir(dst):
            if same_tree(dst, src):
                plan.kept.append(dst)
            else:
                plan.errors.append(
                    f"refusing to replace {dst}: a folder whose content differs from {src}; "
                    "remove it by hand if it is not needed"
                )
        elif os.path.lexists(dst):
            plan.errors.append(f"refusing to replace {dst}: a file where CCCL's {name}/ belongs")
        else:
            plan.links.append((dst, target, False))


def version_key(version: str) -> tuple[int, tuple[int, ...]]:
    parts = tuple(int(p) for p in version.split("."))
    # The soname (fewest components) first, then the highest version.
    return (len(parts), tuple(-p for p in parts))


def plan_libs(plan: Plan, lib_dir: str) -> None:
    chosen: dict[str, str] = {}
    for entry in sorted(os.listdir(lib_dir)):
        match = VERSIONED_LIB.match(entry)
        path = os.path.join(lib_dir, entry)
        if not match or not os.path.isfile(path):
            continue
        base, version = match.groups()
        best = chosen.get(base)
        if best is None or version_key(version) < version_key(VERSIONED_LIB.match(best).group(2)):
            chosen[base] = entry
    for base, entry in sorted(chosen.items()):
        dst = os.path.join(lib_dir, base)
        if is_dangling(dst):
            plan.links.append((dst, entry, True))
        elif os.path.lexists(dst):
            plan.kept.append(dst)
        else:
            plan.links.append((dst, entry, False))
    # Dangling unversioned library links with no versioned file left are stale.
    for entry in sorted(os.listdir(lib_dir)):
        path = os.path.join(lib_dir, entry)
        if entry.endswith(".so") and entry not in chosen and is_dangling(path):
            plan.removals.append(path)


def plan_lib64(plan: Plan, home: str) -> None:
    lib64 = os.path.join(home, "lib64")
    if is_dangling(lib64):
        plan.links.append((lib64, "lib", True))
    elif os.path.islink(lib64):
        if os.path.realpath(lib64) == os.path.realpath(os.path.join(home, "lib")):
            plan.kept.append(lib64)
        else:
            plan.errors.append(
                f"refusing to replace {lib64} -> {os.readlink(lib64)}: it does not point to lib"
            )
    elif os.path.lexists(lib64):
        plan.errors.append(f"refusing to replace {lib64}: a real folder beside {home}/lib")
    else:
        plan.links.append((lib64, "lib", False))


def driver_libcuda(ldconfig_output: str) -> str:
    """The driver's libcuda.so.1 for this machine's ABI, from ``ldconfig -p`` output."""
    for flags, path in LDCONFIG_LIBCUDA.findall(ldconfig_output):
        if ("x86-64" in flags or "AArch64" in flags) and os.path.exists(path):
            return path
    return ""


def plan_libcuda(plan: Plan, lib_dir: str, driver: str) -> tuple[str, bool]:
    """Plan stubs/libcuda.so; returns (what it will resolve to, stub must be built)."""
    stubs = os.path.join(lib_dir, "stubs")
    dst = os.path.join(stubs, "libcuda.so")
    stub = os.path.join(stubs, STUB_NAME)
    if os.path.lexists(dst) and not os.path.islink(dst):
        plan.kept.append(dst)  # a toolkit's own stub
        return dst, False
    current = os.readlink(dst) if os.path.islink(dst) else None
    target = driver or STUB_NAME
    if current == target and os.path.exists(dst):
        plan.kept.append(dst)
        return (driver or stub), False
    if current is None and os.path.lexists(dst):
        plan.errors.append(f"refusing to replace {dst}: not a file or link")
        return "", False
    plan.links.append((dst, target, current is not None))
    return (driver or stub), not driver and not os.path.isfile(stub)


def driver_api_names(cuda_h: str) -> list[str]:
    with open(cuda_h, encoding="utf-8", errors="replace") as handle:
        text = handle.read()
    names = set(CUDA_H_DECLARED.findall(text)) | set(CUDA_H_ALIAS.findall(text))
    names |= {f"{name}_pt{kind.lower()}" for kind, name in CUDA_H_PER_THREAD.findall(text)}
    return sorted(names)


def stub_source(names: list[str]) -> str:
    lines = [
        "/* Link-time stand-in for the NVIDIA driver library, SONAME libcuda.so.1, generated",
        " * from cuda.h. Objects linked with -lcuda record DT_NEEDED libcuda.so.1 and take the",
        " * driver's real libcuda.so.1 at run time; every entry point here returns",
        f" * CUDA_ERROR_STUB_LIBRARY ({STUB_ERROR}). */",
    ]
    lines += [f"int {name}(void) {{ return {STUB_ERROR}; }}" for name in names]
    return "\n".join(lines) + "\n"


def plan_tree(
    home: str,
    cccl_headers: list[str],
    lib64: bool = True,
    unversioned_libs: bool = True,
    libcuda_stub: bool = True,
    driver: str = "",
) -> tuple[Plan, str, str, bool]:
    """Plan the overlay and links of a CUDA tree: (plan, lib_dir, libcuda, build_stub).

    Problems that stop the plan (no include/, no library folder) are in ``plan.errors``.
    """
    plan = Plan()
    include = os.path.join(home, "include")
    if not os.path.isdir(include):
        plan.errors.append(f"cuda_home {home} has no include/ folder: not a CUDA tree")
        return plan, "", "", False
    plan_overlay(plan, include, cccl_headers)
    lib = os.path.join(home, "lib")
    lib64_dir = os.path.join(home, "lib64")
    if os.path.isdir(lib) and not os.path.islink(lib):
        lib_dir = lib
        if lib64:
            plan_lib64(plan, home)
    elif os.path.isdir(lib64_dir):
        lib_dir = lib64_dir  # classic toolkit layout: lib64 is the library folder
    else:
        plan.errors.append(f"cuda_home {home} has neither lib/ nor lib64/: not a CUDA tree")
        return plan, "", "", False
    if unversioned_libs:
        plan_libs(plan, lib_dir)
    libcuda, build = "", False
    if libcuda_stub:
        libcuda, build = plan_libcuda(plan, lib_dir, driver)
    return plan, lib_dir, libcuda, build
