#!/usr/bin/python
# Copyright: sglang-lxc contributors
# Apache-2.0
"""Read, in one call, what the sgl-kernel build decision needs from the target (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_kernel_probe
short_description: The target's side of the sgl-kernel build decision, read in one call
description:
  - Reads the toolchain's nvcc version (after sourcing O(cuda_env_file) as the build does), the
    serving venv's Python, torch and installed O(package) versions, the stamp of the installed
    build (O(stamp_file)) and which source tree O(source_marker) says the target holds.
  - Never changes anything. Called by the C(sglang_kernel_plan) action.
options:
  python:
    description: Python of the serving venv.
    type: path
    required: true
  package:
    description: Distribution name of the sgl-kernel wheel.
    type: str
    default: sglang-kernel
  cuda_env_file:
    description: EnvironmentFile with CUDA_HOME and PATH ("" or missing for none).
    type: str
    default: ""
  stamp_file:
    description: JSON stamp written after the last installed build.
    type: path
    required: true
  source_marker:
    description: File naming the source tree the target holds.
    type: path
    required: true
author:
  - sglang-lxc contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: SGLang | Read the target's side of the build decision
  sglang_kernel_probe:
    python: /opt/sglang/venv/bin/python
    stamp_file: /opt/sglang/venv/.sglang-lxc/sgl-kernel.json
    source_marker: /opt/sglang/build/sgl-kernel/src/.sglang-lxc-tree
"""

RETURN = r"""
nvcc:
  description: Last line of C(nvcc --version), or C(none).
  type: str
  returned: always
python:
  description: The venv's Python version (null without a venv).
  type: str
  returned: always
torch:
  description: The venv's torch version (null when absent).
  type: str
  returned: always
installed:
  description: The installed version of O(package) (null when absent).
  type: str
  returned: always
stamp:
  description: The stamp's content ({} when absent or unreadable).
  type: dict
  returned: always
source_tree:
  description: Identity of the source tree on the target ("" when none).
  type: str
  returned: always
"""

import json
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule

# The venv's own interpreter answers; a missing venv gives nulls.
VENV_QUERY = """
import importlib.metadata as m, json, sys
def v(name):
    try:
        return m.version(name)
    except m.PackageNotFoundError:
        return None
print(json.dumps({"python": "%d.%d.%d" % sys.version_info[:3], "torch": v("torch"),
                  "installed": v(sys.argv[1])}))
"""

# The build script's own way to find nvcc: the EnvironmentFile, then CUDA_HOME/bin first.
NVCC_QUERY = (
    'if [ -n "$1" ] && [ -r "$1" ]; then set -a; . "$1"; set +a; fi; '
    'PATH="${CUDA_HOME:+$CUDA_HOME/bin:}$PATH"; nvcc --version 2>/dev/null'
)


def nvcc_version(output: str) -> str:
    """Last non-empty line of ``nvcc --version`` ("Build cuda_13.0.r13.0/..."), or "none"."""
    lines = [line.strip() for line in (output or "").splitlines() if line.strip()]
    return lines[-1] if lines else "none"


def read_json(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as handle:
            data = json.load(handle)
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def read_text(path: str) -> str:
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return ""


def venv_versions(python: str, package: str) -> dict:
    empty = {"python": None, "torch": None, "installed": None}
    if not os.access(python, os.X_OK):
        return empty
    try:
        done = subprocess.run(
            [python, "-c", VENV_QUERY, package],
            capture_output=True,
            text=True,
            timeout=120,
            check=False,
        )
        return {**empty, **json.loads(done.stdout)} if done.returncode == 0 else empty
    except (OSError, ValueError, subprocess.TimeoutExpired):
        return empty


def main():
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "package": {"type": "str", "default": "sglang-kernel"},
            "cuda_env_file": {"type": "str", "default": ""},
            "stamp_file": {"type": "path", "required": True},
            "source_marker": {"type": "path", "required": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    nvcc = subprocess.run(
        ["/bin/bash", "-c", NVCC_QUERY, "nvcc-query", p["cuda_env_file"] or ""],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    module.exit_json(
        changed=False,
        nvcc=nvcc_version(nvcc.stdout),
        stamp=read_json(p["stamp_file"]),
        source_tree=read_text(p["source_marker"]),
        **venv_versions(p["python"], p["package"]),
    )


if __name__ == "__main__":
    main()
