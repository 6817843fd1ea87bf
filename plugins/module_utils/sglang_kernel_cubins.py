# Copyright: sglang-lxc contributors
# Apache-2.0
"""Which GPU architectures the installed sgl_kernel's libraries hold, read with cuobjdump: the
whole logic of the module sglang_kernel_cubins (documented there), in plain Python, so that its
action plugin can run it bare on the target (``plugin_utils/remote_python.py``)."""

from __future__ import annotations

import glob
import hashlib
import os
import re
import shutil
import subprocess

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


# The module's arguments; its action plugin applies them on the controller.
ARGUMENT_SPEC = {
    "python": {"type": "path", "required": True},
    "import_name": {"type": "str", "default": "sgl_kernel"},
    "cuda_env_file": {"type": "str", "default": ""},
    "gpu_compute_caps": {"type": "list", "elements": "str", "default": []},
    "required": {"type": "list", "elements": "str", "default": ["common_ops"]},
    "cache_dir": {"type": "str", "default": ""},
}


def _run(argv: list[str]) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, check=False)
    except OSError as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def package_dir(python: str, import_name: str) -> str:
    """The installed package's folder: the venv's site-packages first (a regular package, one
    directory listing), else what ``python``'s import system finds (a .pth, an editable
    install); "" when it is not installed."""
    venv = os.path.dirname(os.path.dirname(python))
    found = glob.glob(os.path.join(venv, "lib", "python*", "site-packages", import_name,
                                   "__init__.py"))
    if len(found) == 1:
        return os.path.dirname(found[0])
    if not os.access(python, os.X_OK):
        return ""
    rc, out, _err = _run([python, "-c", FIND_PACKAGE, import_name])
    return out.strip() if rc == 0 else ""


def answer(python: str, import_name: str = "sgl_kernel", cuda_env_file: str = "",
           gpu_compute_caps: list[str] | None = None, required: list[str] | None = None,
           cache_dir: str = "") -> dict:
    """The module's whole result for validated arguments (a failure has ``failed`` and
    ``msg``)."""
    required = list(required or ["common_ops"])
    result: dict = {"changed": False, "libraries": {}, "gpu_archs": [], "cuobjdump": ""}
    caps = list(gpu_compute_caps or [])
    if not caps and shutil.which("nvidia-smi"):
        rc, out, _err = _run(["nvidia-smi", "--query-gpu=compute_cap", "--format=csv,noheader"])
        caps = [line.strip() for line in out.splitlines() if rc == 0 and line.strip()]
    result["gpu_archs"] = sorted({gpu_arch(c) for c in caps})
    package = package_dir(python, import_name)
    if not package:
        venv = os.path.dirname(os.path.dirname(python))
        result["summary"] = f"{import_name} is not installed in {venv}"
        return result
    rc, out, _err = _run(["/bin/bash", "-c", CUOBJDUMP_QUERY, "cuobjdump-query",
                          cuda_env_file or ""])
    tool = out.strip().splitlines()[-1] if out.strip() else ""
    result["cuobjdump"] = tool
    if not tool:
        message = (
            f"cuobjdump not found (CUDA_HOME/bin of {cuda_env_file or 'PATH'}): role "
            "cuda_toolkit installs it from the nvidia-cuda-cuobjdump wheel (toolchain.yml)"
        )
        if result["gpu_archs"]:
            return {**result, "failed": True, "msg": f"{import_name}: {message}"}
        result["summary"] = f"{import_name} cubins not read: {message}"
        return result
    paths = []
    for dirpath, dirnames, filenames in os.walk(package):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        paths.extend(os.path.join(dirpath, name) for name in sorted(filenames)
                     if SUFFIX.search(name))
    key = identity(paths, tool)
    kept = json_cache.read(cache_dir, key)
    result["cached"] = kept is not None
    if kept is not None:
        result["libraries"] = kept
    for path in [] if kept is not None else paths:
        rc, out, err = _run([tool, "--list-elf", path])
        if rc != 0 and "does not contain device code" not in out + err:
            return {**result, "failed": True,
                    "msg": f"{tool} --list-elf {path}: {(err or out).strip()}"}
        lib = SUFFIX.sub("", os.path.relpath(path, package))
        result["libraries"][lib] = list_elf(out)
    if kept is None:
        json_cache.keep(cache_dir, key, result["libraries"])
    verdict = judge(result["libraries"], result["gpu_archs"], required, import_name)
    result["summary"] = verdict["summary"]
    if verdict["problems"]:
        return {**result, "failed": True, "msg": "; ".join(verdict["problems"])
                + ". The installed build has no kernels for this GPU: build sgl-kernel from source "
                "(sglang_kernel_from_source: true) with sglang_kernel_cuda_archs naming it"}
    return result
