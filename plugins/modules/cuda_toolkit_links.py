#!/usr/bin/python
# Copyright: sglang-lxc contributors
# Apache-2.0
"""Make a CUDA 13 tree look like a classic toolkit to JIT builders."""

from __future__ import annotations

import filecmp
import os
import re
import tempfile

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: cuda_toolkit_links
short_description: CCCL header overlay, unversioned library links and lib64 for a CUDA tree
description:
  - Makes the CCCL header folders (C(cub), C(thrust), C(cuda), C(nv)) under C(include/cccl) visible
    directly under C(include/) as relative symlinks, so a host compiler given only
    C(-I$CUDA_HOME/include) finds them.
  - A folder already there with the same content (some wheels ship C(include/nv)) is kept; anything
    else that differs makes the module fail, naming the path, before it changes anything.
  - Links each versioned shared library in C(lib/) (C(libcudart.so.13)) from its unversioned name
    (C(libcudart.so)), unless that name already resolves to a file; links C(lib64) to C(lib).
  - Replaces dangling links of these names (left by an older version) and removes other dangling
    links among them, so no stale link survives.
options:
  cuda_home:
    description: Root of the CUDA tree (the wheel tree C(.../nvidia/cu13) or a system toolkit).
    type: path
    required: true
  cccl_headers:
    description: Folders of C(include/cccl) to make visible under C(include/).
    type: list
    elements: str
    default: [cub, thrust, cuda, nv]
  lib64:
    description: Link C(lib64) to C(lib) when C(lib64) is absent.
    type: bool
    default: true
  unversioned_libs:
    description: Create unversioned C(.so) links for versioned libraries.
    type: bool
    default: true
  libcuda_stub:
    description:
      - Provide C(stubs/libcuda.so) in the library folder, so C(-L$CUDA_HOME/lib64/stubs -lcuda)
        (flashinfer's JIT link) resolves.
      - Where the GPU driver's C(libcuda.so.1) is known to C(ldconfig -p), a link to it; otherwise
        a link to a generated link-time stub (SONAME C(libcuda.so.1); every driver API entry point
        of C(include/cuda.h), each returning C(CUDA_ERROR_STUB_LIBRARY)) built with C(cc), so
        the loader takes the driver's C(libcuda.so.1) at run time. A rerun after the driver
        appears replaces the stub link with the driver link.
      - A regular file C(stubs/libcuda.so) (a classic toolkit's own stub) is kept.
    type: bool
    default: true
  cc:
    description: C compiler that builds the stub when no driver is present.
    type: str
    default: cc
author: sglang-lxc
"""

EXAMPLES = r"""
- name: CUDA | Make CCCL headers visible under include/ and link unversioned libraries
  cuda_toolkit_links:
    cuda_home: /opt/sglang/cuda/13.0-abcd/nvidia/cu13
"""

RETURN = r"""
created:
  description: Links created (path -> target).
  type: list
  returned: always
replaced:
  description: Dangling links replaced (path -> target).
  type: list
  returned: always
removed:
  description: Dangling links removed.
  type: list
  returned: always
kept:
  description: Paths left as they were (same content, or a library name that already resolves).
  type: list
  returned: always
lib_dir:
  description: The library folder used (C(lib) or, for a classic toolkit, C(lib64)).
  type: str
  returned: always
libcuda:
  description: What C(stubs/libcuda.so) resolves to (the driver's library, the generated stub,
    a toolkit's own stub), or empty when C(libcuda_stub) is false.
  type: str
  returned: always
"""

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
    _, mismatch, errors = filecmp.cmpfiles(left, right, cmp.common_files, shallow=False)
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


def driver_libcuda(module: AnsibleModule) -> str:
    """The driver's libcuda.so.1 for this machine's ABI, as the loader knows it (ldconfig -p)."""
    ldconfig = module.get_bin_path("ldconfig", opt_dirs=["/sbin", "/usr/sbin"])
    if not ldconfig:
        return ""
    rc, out, _ = module.run_command([ldconfig, "-p"])
    if rc != 0:
        return ""
    for flags, path in LDCONFIG_LIBCUDA.findall(out):
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


def build_stub(module: AnsibleModule, home: str, stubs: str, cc: str) -> None:
    compiler = module.get_bin_path(cc)
    if not compiler:
        module.fail_json(
            msg=f"no C compiler '{cc}' to build the libcuda.so link-time stub and no driver "
            "libcuda.so.1 in ldconfig -p: install build-essential (cuda_toolkit_os_packages)"
        )
    os.makedirs(stubs, exist_ok=True)
    cuda_h = os.path.join(home, "include", "cuda.h")
    if not os.path.isfile(cuda_h):
        module.fail_json(msg=f"{cuda_h} is missing: cannot list the driver API for the stub")
    names = driver_api_names(cuda_h)
    if "cuInit" not in names:
        module.fail_json(msg=f"{cuda_h} declares no cuInit: not the CUDA driver API header")
    with tempfile.TemporaryDirectory(dir=stubs) as tmp:
        source = os.path.join(tmp, "libcuda_stub.c")
        with open(source, "w", encoding="utf-8") as handle:
            handle.write(stub_source(names))
        out = os.path.join(tmp, STUB_NAME)
        argv = [compiler, "-shared", "-fPIC", "-nostdlib", "-Wl,-soname,libcuda.so.1"]
        rc, _, err = module.run_command([*argv, "-o", out, source])
        if rc != 0:
            module.fail_json(msg=f"building the libcuda.so stub failed: {err.strip()}")
        os.chmod(out, 0o755)
        os.replace(out, os.path.join(stubs, STUB_NAME))


def make_link(path: str, target: str) -> None:
    tmp = f"{path}.tmp-{os.getpid()}"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(target, tmp)
    os.replace(tmp, path)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "cuda_home": {"type": "path", "required": True},
            "cccl_headers": {
                "type": "list",
                "elements": "str",
                "default": ["cub", "thrust", "cuda", "nv"],
            },
            "lib64": {"type": "bool", "default": True},
            "unversioned_libs": {"type": "bool", "default": True},
            "libcuda_stub": {"type": "bool", "default": True},
            "cc": {"type": "str", "default": "cc"},
        },
        supports_check_mode=True,
    )
    home = module.params["cuda_home"]
    include = os.path.join(home, "include")
    if not os.path.isdir(include):
        module.fail_json(msg=f"cuda_home {home} has no include/ folder: not a CUDA tree")

    plan = Plan()
    plan_overlay(plan, include, module.params["cccl_headers"])

    lib = os.path.join(home, "lib")
    lib64 = os.path.join(home, "lib64")
    if os.path.isdir(lib) and not os.path.islink(lib):
        lib_dir = lib
        if module.params["lib64"]:
            plan_lib64(plan, home)
    elif os.path.isdir(lib64):
        lib_dir = lib64  # classic toolkit layout: lib64 is the library folder
    else:
        module.fail_json(msg=f"cuda_home {home} has neither lib/ nor lib64/: not a CUDA tree")
    if module.params["unversioned_libs"]:
        plan_libs(plan, lib_dir)
    libcuda, build = "", False
    if module.params["libcuda_stub"]:
        libcuda, build = plan_libcuda(plan, lib_dir, driver_libcuda(module))

    if plan.errors:
        module.fail_json(msg="; ".join(plan.errors), errors=plan.errors)

    changed = bool(plan.links or plan.removals)
    if changed and not module.check_mode:
        if build:
            build_stub(module, home, os.path.join(lib_dir, "stubs"), module.params["cc"])
        for path, target, _ in plan.links:
            os.makedirs(os.path.dirname(path), exist_ok=True)
            make_link(path, target)
        for path in plan.removals:
            os.unlink(path)

    module.exit_json(
        changed=changed,
        created=[f"{p} -> {t}" for p, t, dangling in plan.links if not dangling],
        replaced=[f"{p} -> {t}" for p, t, dangling in plan.links if dangling],
        removed=plan.removals,
        kept=plan.kept,
        lib_dir=lib_dir,
        libcuda=libcuda,
    )


if __name__ == "__main__":
    main()
