# Copyright: sglang-lxc contributors
# Apache-2.0
"""Bring sgl-kernel's sources into the controller's source cache, offline from then on.

On the controller, for each host (hosts that ask for the same architectures share a build copy),
under the source cache's lock (plugins/plugin_utils/sgl_kernel_cache.py: concurrent runs wait,
a killed run's lock is taken over), after the clone's fetch and checkout:

1. a build copy of the tree (``<cache>/build-copies/<tree>-<transformation>``), made by the
   SM120-only transformation (plugins/plugin_utils/sgl_kernel_archs.py); the tree itself stays
   as it was fetched;
2. every FetchContent pin the build copy still reads (plugins/plugin_utils/sgl_kernel_cmake.py),
   and the pins of the dependencies it builds with add_subdirectory (mscclpp's json, nanobind,
   dlpack), each exported at its commit into ``<cache>/deps/<name>-<ref>``. A pin whose folder
   is missing is fetched through git, with ``sglang_kernel_git_url_rewrites`` as git's
   ``url.<base>.insteadOf`` (a mirror); one that still cannot be had fails the task before any
   build, naming the repository, the commit and the folder to fill;
3. an archive of the build copy and one per dependency (``<cache>/archives``), unpacked on the
   target, and the CMake arguments that point FetchContent at them
   (``FETCHCONTENT_SOURCE_DIR_<NAME>``, ``FETCHCONTENT_FULLY_DISCONNECTED=ON``).

With ``prune_keep`` >= 0 it prunes the build copies instead (the newest by last use, and those in
use, stay). The logic is in functions, unit-tested in tests/unit/sglang/test_kernel_sources.py and
test_kernel_cache.py.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import shutil
import subprocess
import tarfile
from pathlib import Path

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import git_rewrites as _git
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import sgl_kernel_archs as _archs
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import sgl_kernel_cache as _cache
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import sgl_kernel_cmake as _cmake
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.action_args import task_args
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.source_tree import folder_tree_id

display = Display()

# What a build copy's name depends on: the transformation's own code.
TRANSFORMATION_CODE = (Path(_archs.__file__), Path(_cmake.__file__))
SKIP_TOP = ("build", "dist", ".git")
MAX_DEPTH = 3


def transformation_id(archs: list, options_off: list) -> str:
    """Changes with the asked architectures, the options and the transformation's own code."""
    digest = hashlib.sha1()
    for path in TRANSFORMATION_CODE:
        digest.update(path.read_bytes())
    digest.update(json.dumps([list(map(str, archs)), sorted(options_off)]).encode())
    return digest.hexdigest()[:12]


def options_off(cmake_args: list) -> list[str]:
    """Names the role passes as -D<NAME>=OFF."""
    out = []
    for arg in cmake_args:
        arg = str(arg)
        if arg.startswith("-D") and "=" in arg:
            name, value = arg[2:].split("=", 1)
            if value.upper() in ("OFF", "FALSE", "0", "NO"):
                out.append(name.split(":")[0])
    return out


def make_build_copy(tree: str, dest: str, archs: list, off: list) -> dict:
    """Copy the tree to dest (aside, then renamed) and transform it; the record is kept there."""
    record_file = os.path.join(dest, ".sglang-lxc-transform.json")
    if os.path.isfile(record_file):
        with open(record_file, encoding="utf-8") as handle:
            return json.load(handle)
    partial = f"{dest}.{os.getpid()}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    shutil.copytree(
        tree,
        partial,
        symlinks=True,
        ignore=lambda d, names: [n for n in names if d == tree and n in SKIP_TOP],
    )
    try:
        record = _archs.transform(partial, archs, off)
    except Exception:
        shutil.rmtree(partial, ignore_errors=True)
        raise
    with open(os.path.join(partial, ".sglang-lxc-transform.json"), "w", encoding="utf-8") as handle:
        json.dump(record, handle, indent=1)
    shutil.rmtree(dest, ignore_errors=True)
    os.rename(partial, dest)
    return record


def dep_folder(cache: str, pin) -> str:
    _url, ref = pin.git
    return os.path.join(
        cache, "deps", f"{_cmake.safe_name(pin.name)}-{_cmake.safe_name(ref or pin.url)}"
    )


def mirror_folder(cache: str, repository: str) -> str:
    name = repository.split("://", 1)[-1].removesuffix(".git").strip("/")
    return os.path.join(cache, "git", _cmake.safe_name(name) + ".git")


def fetch_dep(cache: str, pin, env: dict, run=subprocess.run, fd: int | None = None) -> str:
    """Export the pin's commit into its cache folder; returns "" or the reason it failed."""
    repository, ref = pin.git
    folder = dep_folder(cache, pin)
    if not repository:
        return f"{pin.url} is not a git repository the role can clone"
    mirror = mirror_folder(cache, repository)
    git = _cache.git_runner(env, fd, run)

    if not os.path.isdir(mirror):
        os.makedirs(os.path.dirname(mirror), exist_ok=True)
        done = git("init", "--quiet", "--bare", mirror)
        if done.returncode != 0:
            return _cache.git_reason(done)
    # only the pinned commit (or tag), not the repository's history
    fetched = git("-C", mirror, "fetch", "--quiet", "--depth", "1", repository, ref)
    if fetched.returncode != 0:
        return _cache.git_reason(fetched)
    found = git("-C", mirror, "rev-parse", "--verify", "--quiet", "FETCH_HEAD^{commit}")
    if found.returncode != 0:
        return f"{ref} fetched from {repository} is not a commit"
    partial = f"{folder}.{os.getpid()}.partial"
    shutil.rmtree(partial, ignore_errors=True)
    os.makedirs(partial)
    archive = git(
        "-C", mirror, "archive", "--format=tar", "-o", partial + ".tar", found.stdout.strip()
    )
    if archive.returncode != 0:
        shutil.rmtree(partial, ignore_errors=True)
        return archive.stderr.strip() or "git archive failed"
    with tarfile.open(partial + ".tar") as tar:
        tar.extractall(partial, filter="data")
    os.unlink(partial + ".tar")
    with open(os.path.join(partial, ".sglang-lxc-pin"), "w", encoding="utf-8") as handle:
        handle.write(f"{repository} {ref} {found.stdout.strip()}\n")
    os.rename(partial, folder)
    return ""


def collect(build_copy: str, cache: str, env: dict, fetch: bool, fetcher=fetch_dep) -> dict:
    """Every pin the build reads, recursively through add_subdirectory dependencies."""
    deps: list[dict] = []
    missing: list[dict] = []
    queue = [(build_copy, _cmake.build_files(build_copy), "", 0)]
    seen: set[str] = set()
    while queue:
        root, files, parent, depth = queue.pop(0)
        for pin in _cmake.read_pins(root, files, parent=parent):
            if pin.name.lower() in seen:
                continue
            seen.add(pin.name.lower())
            repository, ref = pin.git
            folder = dep_folder(cache, pin)
            entry = {
                "name": pin.name,
                "cmake_name": pin.cmake_name,
                "repository": repository or pin.url,
                "ref": ref,
                "where": pin.where(),
                "folder": folder,
                "subdirectory": pin.subdirectory,
            }
            error = ""
            if not os.path.isdir(folder) and fetch:
                error = fetcher(cache, pin, env)
            if not os.path.isdir(folder):
                entry["error"] = error or "not fetched (check mode)"
                missing.append(entry)
                continue
            marker = os.path.join(folder, ".sglang-lxc-pin")
            if not os.path.exists(marker):  # filled by hand: say so in the folder the target gets
                with open(marker, "w", encoding="utf-8") as handle:
                    handle.write(f"{repository or pin.url} {ref} filled-by-hand\n")
            deps.append(entry)
            if pin.subdirectory and depth < MAX_DEPTH:
                queue.append((folder, _cmake.cmake_files(folder), pin.name, depth + 1))
    return {"deps": deps, "missing": missing}


def missing_message(missing: list[dict]) -> str:
    what = "dependency is" if len(missing) == 1 else "dependencies are"
    lines = [
        f"sgl-kernel: {len(missing)} FetchContent {what} not in the controller's source cache "
        "and could not be fetched; nothing was built:"
    ]
    for m in missing:
        lines.append(
            f"- {m['name']} ({m['where']}): {m['repository']} at {m['ref']}: {m['error']}. Fill "
            f"{m['folder']} with the files of that commit (git archive), or make the repository "
            "reachable (sglang_kernel_git_url_rewrites: a mirror as git's url.<base>.insteadOf)."
        )
    return "\n".join(lines)


def transform_args(record: dict, src: str) -> list[str]:
    """The build copy's CMake arguments (our helper's include, the asked architectures)."""
    out = []
    for name, value in sorted((record.get("cmake_args") or {}).items()):
        if name == "CMAKE_PROJECT_TOP_LEVEL_INCLUDES":
            value = f"{src}/{value}"
        out.append(f"-D{name}={value}")
    return out


def pack(folder: str, archive: str) -> None:
    """tar.gz of a folder, written aside and renamed (once per name)."""
    if os.path.isfile(archive):
        return
    os.makedirs(os.path.dirname(archive), exist_ok=True)
    partial = f"{archive}.{os.getpid()}.partial"
    with tarfile.open(partial, "w:gz", compresslevel=1) as tar:
        for name in sorted(os.listdir(folder)):
            if name in SKIP_TOP:
                continue
            tar.add(os.path.join(folder, name), arcname=name)
    os.rename(partial, archive)


ARGS = {
    "source_tree": "",
    "cache_dir": None,
    "work_dir": "",
    "cuda_archs": [],
    "cmake_args": [],
    "git_url_rewrites": {},
    # the clone (sglang_kernel_source_git_url/_ref), fetched and checked out under the lock
    "git_url": "",
    "git_ref": "",
    "clone_dir": "",
    "lock_wait": 1800,
    # pruning instead: keep this many build copies by last use, and every one in in_use
    "prune_keep": -1,
    "in_use": [],
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGS)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = task_args("sglang_kernel_sources", dict(self._task.args), ARGS)
        cache = os.path.expanduser(str(args["cache_dir"]))
        host = (task_vars or {}).get("inventory_hostname", "?")
        prune_keep = int(args["prune_keep"])
        if prune_keep < 0:
            missing = [k for k in ("source_tree", "work_dir", "cuda_archs") if not args[k]]
            if missing:
                raise AnsibleActionFail(f"sglang_kernel_sources: missing arguments {missing}")
        try:
            with _cache.locked(
                cache, float(args["lock_wait"]), display.display, f"run for {host}"
            ) as lock:
                if prune_keep >= 0:
                    result.update(self._prune(cache, prune_keep, args["in_use"]))
                else:
                    result.update(self._sources(args, cache, lock))
                result["lock_waited_s"] = lock["waited_s"]
                if lock["took_over"]:
                    result["lock_took_over"] = lock["took_over"]
        except _cache.CacheError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        return result

    def _prune(self, cache: str, keep: int, in_use: list) -> dict:
        if self._task.check_mode:
            return {"changed": False, "removed": [], "freed_bytes": 0, "msg": "check mode"}
        pruned = _cache.prune(cache, keep, [os.path.expanduser(str(p)) for p in in_use or []])
        count = len(pruned["removed"])
        return {
            **pruned,
            "changed": bool(count),
            "msg": f"pruned {count} old build cop{'y' if count == 1 else 'ies'} "
            f"({_cache.human(pruned['freed_bytes'])} freed), kept {len(pruned['kept'])}",
        }

    def _sources(self, args: dict, cache: str, lock: dict) -> dict:
        result: dict = {}
        tree = os.path.expanduser(str(args["source_tree"])).rstrip("/")
        work = str(args["work_dir"]).rstrip("/")
        check_mode = bool(self._task.check_mode)
        env = _git.git_url_rewrite_env(args["git_url_rewrites"])
        cloned = {}
        if args["git_url"] and not check_mode:
            clone = os.path.expanduser(str(args["clone_dir"]))
            git = _cache.git_runner(env, lock["fd"])
            cloned = _cache.checkout(clone, str(args["git_url"]), str(args["git_ref"]), git)
            result["commit"] = cloned["commit"]
        if not os.path.isfile(os.path.join(tree, "CMakeLists.txt")):
            if check_mode:
                result.update(changed=False, skipped_reason=f"{tree} is not there yet (check mode)")
                return result
            raise AnsibleActionFail(f"sgl-kernel source: no CMakeLists.txt in {tree}")
        archs = [str(a) for a in args["cuda_archs"]]
        off = options_off(args["cmake_args"])
        content = folder_tree_id(tree)
        build_copy = os.path.join(
            cache, "build-copies", f"{content[:16]}-{transformation_id(archs, off)}"
        )
        changed = not os.path.isdir(build_copy) or bool(cloned.get("changed"))
        try:
            record = (
                make_build_copy(tree, build_copy, archs, off)
                if not check_mode or os.path.isdir(build_copy)
                else {}
            )
        except (_archs.TransformError, _cmake.CMakeReadError) as exc:
            raise AnsibleActionFail(f"sgl-kernel SM120-only transformation: {exc}") from exc
        if check_mode and not record:
            result.update(
                changed=True, build_copy=build_copy, deps=[], cmake_args=[], msg="check mode"
            )
            return result
        if not check_mode:
            _cache.mark_used(build_copy)
        try:
            found = collect(
                build_copy,
                cache,
                env,
                fetch=not check_mode,
                fetcher=functools.partial(fetch_dep, fd=lock["fd"]),
            )
        except _cmake.CMakeReadError as exc:
            raise AnsibleActionFail(f"sgl-kernel source: {exc}") from exc
        if found["missing"]:
            if check_mode:
                result.update(
                    changed=True,
                    missing=found["missing"],
                    build_copy=build_copy,
                    deps=[],
                    cmake_args=[],
                )
                return result
            raise AnsibleActionFail(
                missing_message(found["missing"]), result={"missing": found["missing"]}
            )
        archives = os.path.join(cache, "archives")
        copy_archive = os.path.join(archives, f"sgl-kernel-{os.path.basename(build_copy)}.tar.gz")
        if not check_mode:
            pack(build_copy, copy_archive)
        folders = {}
        for dep in found["deps"]:
            base = os.path.basename(dep["folder"])
            dep["archive"] = os.path.join(archives, f"dep-{base}.tar.gz")
            dep["target"] = f"{work}/deps/{base}"
            folders[dep["name"]] = dep["target"]
            if not check_mode:
                pack(dep["folder"], dep["archive"])
        allow = record.get("archs", [])
        result.update(
            changed=changed,
            tree=content,
            build_copy=build_copy,
            archive=copy_archive,
            transform=record,
            deps=found["deps"],
            cmake_args=_cmake.fetchcontent_args(folders) + transform_args(record, f"{work}/src"),
            # the configured-build check of this copy: the architectures asked for it
            check_args=" ".join(
                [f"--allow {a}" for a in allow] + [f"--search {work}/src", f"--search {work}/deps"]
            ),
            source_info={
                "transform": transformation_id(archs, off),
                "deps": {d["name"]: d["ref"] for d in found["deps"]},
                "left_out": [t["target"] for t in record.get("left_out", [])],
            },
        )
        return result
