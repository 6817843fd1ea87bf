#!/usr/bin/python
# Copyright: sglang-lxc contributors
# Apache-2.0
"""Make a CUDA 13 tree look like a classic toolkit to JIT builders."""

from __future__ import annotations

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
author:
  - sglang-lxc contributors (!UNKNOWN)
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

import os
import tempfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang_lxc.serving.plugins.module_utils.cuda_links import (
    STUB_NAME,
    driver_api_names,
    driver_libcuda,
    plan_tree,
    stub_source,
)


def ldconfig_output(module: AnsibleModule) -> str:
    """``ldconfig -p``: the libraries the loader knows (where the driver's libcuda.so.1 shows)."""
    ldconfig = module.get_bin_path("ldconfig", opt_dirs=["/sbin", "/usr/sbin"])
    if not ldconfig:
        return ""
    rc, out, _err = module.run_command([ldconfig, "-p"])
    return out if rc == 0 else ""


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
        rc, _out, err = module.run_command([*argv, "-o", out, source])
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
    if not os.path.isdir(os.path.join(home, "include")):
        module.fail_json(msg=f"cuda_home {home} has no include/ folder: not a CUDA tree")
    driver = driver_libcuda(ldconfig_output(module)) if module.params["libcuda_stub"] else ""
    plan, lib_dir, libcuda, build = plan_tree(
        home,
        module.params["cccl_headers"],
        lib64=module.params["lib64"],
        unversioned_libs=module.params["unversioned_libs"],
        libcuda_stub=module.params["libcuda_stub"],
        driver=driver,
    )

    if plan.errors:
        module.fail_json(msg="; ".join(plan.errors), errors=plan.errors)

    changed = bool(plan.links or plan.removals)
    if changed and not module.check_mode:
        if build:
            build_stub(module, home, os.path.join(lib_dir, "stubs"), module.params["cc"])
        for path, target, _dangling in plan.links:
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
