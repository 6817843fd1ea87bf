#!/usr/bin/python
# Copyright: sglang-lxc contributors
# Apache-2.0
"""Which GPU architectures the installed sgl_kernel's libraries hold, read with cuobjdump."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_kernel_cubins
short_description: The cubin architectures of the installed sgl_kernel's libraries (cuobjdump)
description:
  - Finds the installed O(import_name) package of the serving venv (without importing it), and
    lists every shared library's cubins with C(cuobjdump --list-elf) (the toolchain's, found
    after sourcing O(cuda_env_file) as the build does; role cuda_toolkit installs it from the
    C(nvidia-cuda-cuobjdump) wheel).
  - Reads the GPUs' compute capabilities with C(nvidia-smi) (or takes O(gpu_compute_caps)). Fails,
    naming the libraries and the GPU's architecture, when no library matching O(required) holds a
    cubin for it, for the lock's wheel and a source build alike. Without a GPU it only reports.
  - Never changes anything.
options:
  python:
    description: Python of the serving venv.
    type: path
    required: true
  import_name:
    description: The package whose libraries are read.
    type: str
    default: sgl_kernel
  cuda_env_file:
    description: EnvironmentFile with CUDA_HOME and PATH ("" for none).
    type: str
    default: ""
  gpu_compute_caps:
    description: The GPUs' compute capabilities (C(12.0)); empty asks C(nvidia-smi).
    type: list
    elements: str
    default: []
  required:
    description: Library names (no folder, no suffix); one of them must hold the GPU's architecture.
    type: list
    elements: str
    default: [common_ops]
  cache_dir:
    description:
      - Folder (root-only) of listings already read. A listing is kept under a hash of every
        library's path, size, mtime and inode and of cuobjdump's own, so a rerun over the same
        installed files reads no library again (about 2 s of cuobjdump on sgl-kernel's eight);
        a new install or a new cuobjdump reads them afresh. Empty turns the cache off.
    type: str
    default: ""
author:
  - sglang-lxc contributors (!UNKNOWN)
attributes:
  check_mode:
    support: full
    description: Reads only.
  diff_mode:
    support: none
    description: Reports no diff.
  platform:
    support: full
    platforms: posix
    description: Runs on the target.
"""

EXAMPLES = r"""
- name: SGLang | Read the cubin architectures of the installed sgl_kernel
  sglang_lxc.serving.sglang_kernel_cubins:
    python: /opt/sglang/venv/bin/python
    cuda_env_file: /etc/sglang/cuda.env
"""

RETURN = r"""
libraries:
  description: Each library (path in the package, no suffix) with its cubins per architecture.
  type: dict
  returned: always
  sample: {"sm100/common_ops": {"sm_120a": 56, "sm_90": 56}}
cached:
  description: True when the listing was taken from O(cache_dir) (the same files were read before).
  type: bool
  returned: when the libraries were found
gpu_archs:
  description: The GPUs' architectures (C(sm_120)); empty without a GPU.
  type: list
  elements: str
  returned: always
cuobjdump:
  description: The cuobjdump that read them ("" when none was found).
  type: str
  returned: always
summary:
  description: One line for the checklist.
  type: str
  returned: always
  sample: "sgl_kernel common_ops: sm_120a present (sm100/common_ops, 56 cubins)"
"""

import hashlib
import os
import re
import subprocess

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang_lxc.serving.plugins.module_utils import json_cache

# The build script's own way to find the toolchain: the EnvironmentFile, then CUDA_HOME/bin first.
CUOBJDUMP_QUERY = (
    'if [ -n "$1" ] && [ -r "$1" ]; then set -a; . "$1"; set +a; fi; '
    'PATH="${CUDA_HOME:+$CUDA_HOME/bin:}$PATH"; command -v cuobjdump || true'
)
FIND_PACKAGE = (
    "import importlib.util, sys; s = importlib.util.find_spec(sys.argv[1]); "
    "print(s.submodule_search_locations[0] if s and s.submodule_search_locations else '')"
)
CUBIN = re.compile(r"^ELF file\s+\d+:\s+\S*?\.(sm_\d+[a-z]?)\.cubin\s*$", re.MULTILINE)
SUFFIX = re.compile(r"(\.abi3|\.cpython-[^.]+)?\.so(\.\d+)*$")


def list_elf(text: str) -> dict[str, int]:
    """{'sm_120a': 56, ...} from cuobjdump --list-elf output."""
    counts: dict[str, int] = {}
    for arch in CUBIN.findall(text):
        counts[arch] = counts.get(arch, 0) + 1
    return counts


def arch_number(arch: str) -> int:
    return int(re.sub(r"\D", "", arch.split("_", 1)[-1]) or 0)


def gpu_arch(cap: str) -> str:
    """'12.0' -> 'sm_120'."""
    major, _dot, minor = str(cap).strip().partition(".")
    return f"sm_{int(major)}{int(minor or 0)}"


def _order(archs) -> list[str]:
    return sorted(archs, key=lambda a: (arch_number(a), a))


def judge(libraries: dict, gpu_archs: list[str], required: list[str], package: str) -> dict:
    """{"summary", "problems"}: each GPU architecture must be in one required library."""
    wanted = {lib: archs for lib, archs in libraries.items() if lib.split("/")[-1] in required}
    if not gpu_archs:
        held = "; ".join(
            f"{lib} {' '.join(_order(archs)) or 'no cubins'}"
            for lib, archs in sorted(libraries.items())
        )
        return {
            "summary": f"{package} cubins (cuobjdump; no GPU, reported only): "
            + (held or "no libraries"),
            "problems": [],
        }
    found, problems = [], []
    for gpu in gpu_archs:
        having = {
            lib: sum(n for a, n in archs.items() if arch_number(a) == arch_number(gpu))
            for lib, archs in wanted.items()
        }
        having = {lib: n for lib, n in having.items() if n}
        names = "/".join(required)
        if having:
            hits = sorted(
                {a for lib in having for a in wanted[lib] if arch_number(a) == arch_number(gpu)}
            )
            where = ", ".join(f"{lib}: {n} cubins" for lib, n in sorted(having.items()))
            found.append(f"{package} {names}: {'/'.join(hits)} present ({where})")
            continue
        held = (
            "; ".join(
                f"{lib} holds {', '.join(_order(archs)) or 'no cubins'}"
                for lib, archs in sorted(wanted.items())
            )
            or f"no {names} library found"
        )
        problems.append(
            f"{package}: the GPU's {gpu} is in no {names} library: {held} (cuobjdump --list-elf)"
        )
    return {"summary": "; ".join(found + problems), "problems": problems}


def identity(paths: list[str], tool: str) -> str:
    """Hash of what a listing depends on: path, size, mtime and inode of each file read."""
    digest = hashlib.sha256()
    for path in [tool, *paths]:
        st = os.stat(path)
        digest.update(f"{path}\0{st.st_size}\0{st.st_mtime_ns}\0{st.st_ino}\n".encode())
    return digest.hexdigest()[:32]


def main():
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "import_name": {"type": "str", "default": "sgl_kernel"},
            "cuda_env_file": {"type": "str", "default": ""},
            "gpu_compute_caps": {"type": "list", "elements": "str", "default": []},
            "required": {"type": "list", "elements": "str", "default": ["common_ops"]},
            "cache_dir": {"type": "str", "default": ""},
        },
        supports_check_mode=True,
    )
    p = module.params
    result = {"changed": False, "libraries": {}, "gpu_archs": [], "cuobjdump": ""}
    caps = list(p["gpu_compute_caps"])
    if not caps:
        rc, out, _err = (
            module.run_command(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"])
            if module.get_bin_path("nvidia-smi")
            else (1, "", "")
        )
        caps = [line.strip() for line in out.splitlines() if rc == 0 and line.strip()]
    result["gpu_archs"] = sorted({gpu_arch(c) for c in caps})
    package = ""
    if os.access(p["python"], os.X_OK):
        rc, out, _err = module.run_command([p["python"], "-c", FIND_PACKAGE, p["import_name"]])
        package = out.strip() if rc == 0 else ""
    if not package:
        venv = os.path.dirname(os.path.dirname(p["python"]))
        result["summary"] = f"{p['import_name']} is not installed in {venv}"
        module.exit_json(**result)
    query = subprocess.run(
        ["/bin/bash", "-c", CUOBJDUMP_QUERY, "cuobjdump-query", p["cuda_env_file"] or ""],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    tool = query.stdout.strip().splitlines()[-1] if query.stdout.strip() else ""
    result["cuobjdump"] = tool
    if not tool:
        message = (
            f"cuobjdump not found (CUDA_HOME/bin of {p['cuda_env_file'] or 'PATH'}): role "
            "cuda_toolkit installs it from the nvidia-cuda-cuobjdump wheel (toolchain.yml)"
        )
        if result["gpu_archs"]:
            module.fail_json(msg=f"{p['import_name']}: {message}", **result)
        result["summary"] = f"{p['import_name']} cubins not read: {message}"
        module.exit_json(**result)
    paths = []
    for dirpath, dirnames, filenames in os.walk(package):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        paths.extend(os.path.join(dirpath, name) for name in sorted(filenames)
                     if SUFFIX.search(name))
    key = identity(paths, tool)
    kept = json_cache.read(p["cache_dir"], key)
    result["cached"] = kept is not None
    if kept is not None:
        result["libraries"] = kept
    for path in [] if kept is not None else paths:
        rc, out, err = module.run_command([tool, "--list-elf", path])
        if rc != 0 and "does not contain device code" not in out + err:
            module.fail_json(msg=f"{tool} --list-elf {path}: {(err or out).strip()}", **result)
        lib = SUFFIX.sub("", os.path.relpath(path, package))
        result["libraries"][lib] = list_elf(out)
    if kept is None:
        json_cache.keep(p["cache_dir"], key, result["libraries"])
    verdict = judge(result["libraries"], result["gpu_archs"], p["required"], p["import_name"])
    result["summary"] = verdict["summary"]
    if verdict["problems"]:
        module.fail_json(
            msg="; ".join(verdict["problems"])
            + ". The installed build has no kernels for this GPU: build sgl-kernel from source "
            "(sglang_kernel_from_source: true) with sglang_kernel_cuda_archs naming it",
            **result,
        )
    module.exit_json(**result)


if __name__ == "__main__":
    main()
