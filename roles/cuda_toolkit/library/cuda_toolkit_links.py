#!/usr/bin/python
# Copyright: sglang-lxc contributors
# Apache-2.0
"""Make a CUDA 13 tree look like a classic toolkit to JIT builders."""

from __future__ import annotations

import filecmp
import os
import re

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
"""

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

    if plan.errors:
        module.fail_json(msg="; ".join(plan.errors), errors=plan.errors)

    changed = bool(plan.links or plan.removals)
    if changed and not module.check_mode:
        for path, target, _ in plan.links:
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
    )


if __name__ == "__main__":
    main()
