# Copyright: sglang-lxc contributors
# Apache-2.0
"""Decide whether sgl-kernel needs a build, and with what: one task instead of a Jinja pipeline.

On the controller: the source tree's identity (git tree id of the subdir, or a content hash of
the folder). On the target, through the ``sglang_kernel_probe`` and ``sglang_build_resources``
modules: nvcc, the venv's Python/torch/installed version, the stamp of the installed build, the
source tree the target holds, CPUs and memory. From these: the build inputs (the stamp's
content), whether they differ from the stamp, the job cap (plugins/plugin_utils/build_caps.py)
and the build's environment. Read-only, so it runs in check mode as well.

The pure functions below are unit-tested in tests/unit/sglang/test_kernel_plan.py.
"""

from __future__ import annotations

import hashlib
import json
import os
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import build_caps as _caps
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.action_args import task_args
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.source_tree import (
    folder_tree_id,
    git_tree_id,
)

# Not part of a source tree's identity (build output, VCS data, byte code).


# ------------------------------------------------------------------------------ the decision


def cmake_args(base: list, extra: list, nvcc_threads: Any) -> list[str]:
    return [str(a) for a in [*base, *extra]] + [f"-DSGL_KERNEL_COMPILE_THREADS={nvcc_threads}"]


def build_inputs(source: dict, args: dict, probe: dict) -> dict:
    """What defines the build's output; stored as the stamp's ``inputs``.

    The job cap is left out on purpose: it follows the container's free memory, which moves
    between runs.
    """
    return {
        "source": source,
        "cmake_args": cmake_args(
            args["cmake_args"], args["extra_cmake_args"], args["nvcc_threads"]
        ),
        "cuda_archs": [str(a) for a in args["cuda_archs"]],
        "env": dict(args["build_env"]),
        "ccache": bool(args["ccache_dir"]),
        "toolchain": {
            "nvcc": probe.get("nvcc") or "none",
            "python": probe.get("python"),
            "torch": probe.get("torch"),
        },
    }


def _normal(value: Any) -> Any:
    """As stored in the stamp's JSON (tuples become lists, numbers keep their form)."""
    return json.loads(json.dumps(value, sort_keys=True))


def build_reason(stamp: dict, inputs: dict, installed: str | None) -> str:
    """Why a build is needed, or "" when the installed build matches the inputs."""
    if not inputs["source"].get("tree"):
        return "the source tree's identity is unknown (no clone yet, check mode)"
    if not stamp:
        return "no stamp of an installed build"
    old = stamp.get("inputs") or {}
    new = _normal(inputs)
    changed = sorted(k for k in set(old) | set(new) if old.get(k) != new.get(k))
    if changed:
        return f"inputs changed: {', '.join(changed)}"
    if stamp.get("version") != installed:
        return f"installed {installed or 'nothing'}, the stamp says {stamp.get('version')}"
    return ""


def config_id(inputs: dict) -> str:
    """Identity of everything but the source: a change starts from an empty build tree."""
    rest = {k: v for k, v in inputs.items() if k != "source"}
    return hashlib.sha1(json.dumps(rest, sort_keys=True).encode()).hexdigest()


def ccache_env(ccache_dir: str) -> dict[str, str]:
    if not ccache_dir:
        return {}
    return {
        "CCACHE_DIR": ccache_dir,
        "CMAKE_C_COMPILER_LAUNCHER": "ccache",
        "CMAKE_CXX_COMPILER_LAUNCHER": "ccache",
        "CMAKE_CUDA_COMPILER_LAUNCHER": "ccache",
    }


def build_environment(inputs: dict, cap: dict, args: dict, paths: dict) -> dict[str, str]:
    """Environment of build-wheel.sh; sglang_kernel_build_env wins over everything."""
    jobs = str(cap["jobs"])
    env = {
        "SGLK_PYTHON": paths["python"],
        "SGLK_SRC": paths["src"],
        "SGLK_WORK": paths["work_dir"],
        "SGLK_CUDA_ENV": args["cuda_env_file"],
        "SGLK_CONFIG_ID": config_id(inputs),
        "MAX_JOBS": jobs,
        "CMAKE_BUILD_PARALLEL_LEVEL": jobs,
        "CMAKE_ARGS": " ".join(inputs["cmake_args"]),
        "TORCH_CUDA_ARCH_LIST": ";".join(inputs["cuda_archs"]),
        **ccache_env(args["ccache_dir"]),
    }
    env.update({str(k): str(v) for k, v in args["build_env"].items()})
    return env


def plan(args: dict, source: dict, probe: dict, resources: dict, paths: dict) -> dict:
    """Everything the role's build sequence needs, from the gathered facts."""
    inputs = build_inputs(source, args, probe)
    cap = _caps.build_job_cap_explain(
        resources["cpus"],
        resources["mem_available_bytes"],
        args["per_thread_gb"],
        args["nvcc_threads"],
        args["reserve_gb"],
        args["max_jobs"],
        archs=len(args["cuda_archs"]),
    )
    reason = build_reason(probe.get("stamp") or {}, inputs, probe.get("installed"))
    tree = source.get("tree", "")
    return {
        "build": bool(reason),
        "reason": reason or "the installed build matches its stamp",
        "installed": probe.get("installed"),
        "inputs": inputs,
        "cap": cap,
        "source_tree": paths["source_tree"],
        "source_current": bool(tree) and probe.get("source_tree") == tree,
        "archive": f"{paths['cache_dir']}/sgl-kernel-{tree}.tar.gz",
        "dirs": [
            paths["work_dir"],
            os.path.dirname(paths["stamp_file"]),
            *([args["ccache_dir"]] if args["ccache_dir"] else []),
        ],
        "environment": build_environment(inputs, cap, args, paths),
    }


# ------------------------------------------------------------------------------ the action

ARGS = {
    # controller-side source
    "source_root": None,
    "git_url": "",
    "git_ref": "",
    "subdir": "",
    "from_git": False,
    "source_info": {},
    "cache_dir": None,
    # target paths
    "python": None,
    "package": "sglang-kernel",
    "work_dir": None,
    "src": None,
    "stamp_file": None,
    "cuda_env_file": "",
    # build knobs
    "cmake_args": [],
    "extra_cmake_args": [],
    "nvcc_threads": 1,
    "cuda_archs": [],
    "build_env": {},
    "ccache_dir": "",
    "per_thread_gb": 4,
    "reserve_gb": 4,
    "max_jobs": 0,
}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset(ARGS)

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        del tmp
        args = task_args("sglang_kernel_plan", dict(self._task.args), ARGS)
        args["from_git"] = bool(args["from_git"])
        args["cache_dir"] = os.path.expanduser(str(args["cache_dir"]))
        root = os.path.expanduser(str(args["source_root"]))
        subdir = str(args["subdir"]).strip("/")
        tree_dir = f"{root}/{subdir}" if subdir else root.rstrip("/")

        if args["from_git"]:
            tree, error = git_tree_id(root, subdir)
            if error and not self._task.check_mode:
                raise AnsibleActionFail(f"sgl-kernel source: git rev-parse failed: {error}")
            source = {
                "git": args["git_url"],
                "ref": args["git_ref"],
                "subdir": args["subdir"],
                "tree": tree,
            }
        else:
            source = {"folder": tree_dir, "tree": folder_tree_id(tree_dir)}
        # the build copy's transformation and its FetchContent dependencies (sglang_kernel_sources)
        source.update(dict(args["source_info"] or {}))

        probe = self._module(
            "sglang_lxc.serving.sglang_kernel_probe",
            {
                "python": args["python"],
                "package": args["package"],
                "cuda_env_file": args["cuda_env_file"],
                "stamp_file": args["stamp_file"],
                "source_marker": f"{args['src']}/.sglang-lxc-tree",
            },
            task_vars,
        )
        resources = self._module("sglang_lxc.serving.sglang_build_resources", {}, task_vars)
        paths = {k: str(args[k]) for k in ("python", "src", "work_dir", "stamp_file")}
        paths["cache_dir"] = args["cache_dir"]
        paths["source_tree"] = tree_dir
        try:
            result.update(plan(args, source, probe, resources, paths))
        except (ValueError, KeyError, TypeError, _caps.AnsibleFilterError) as exc:
            raise AnsibleActionFail(f"sglang_kernel_plan: {exc}") from exc
        result["changed"] = False
        return result

    def _module(self, name: str, module_args: dict, task_vars) -> dict:
        res = self._execute_module(module_name=name, module_args=module_args, task_vars=task_vars)
        if res.get("failed"):
            raise AnsibleActionFail(f"{name}: {res.get('msg', res)}")
        return res
