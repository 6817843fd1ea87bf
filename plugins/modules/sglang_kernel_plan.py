#!/usr/bin/python
# Copyright: sglang-lxc contributors
# Apache-2.0 (see galaxy.yml)

# Documentation only: the work is done by the action plugin of the same name
# (plugins/action/sglang_kernel_plan.py), on the controller and through the modules
# sglang_kernel_probe and sglang_build_resources on the target.

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_kernel_plan
short_description: Decide whether sgl-kernel needs a build, and with what job cap
description:
  - On the controller, the source tree's identity (git's tree id of the subdir, or a content hash
    of the folder). On the target, through M(sglang_lxc.serving.sglang_kernel_probe) and
    M(sglang_lxc.serving.sglang_build_resources), nvcc's version, the venv's Python, torch and
    installed kernel, the stamp of the installed build, the source tree the target holds, CPUs and
    memory.
  - From these, the build inputs (the stamp's content), whether they differ from the stamp
    (C(build), C(reason)), the job cap (C(MAX_JOBS) from the container's own CPUs and memory,
    docs/build-caps.md) and the build's environment.
  - Read-only; it runs in check mode too and never reports a change.
version_added: 0.1.0
author:
  - sglang-lxc contributors (!UNKNOWN)
options:
  source_root: {description: The source folder on the controller., type: path, required: true}
  git_url: {description: The git URL the tree came from (recorded)., type: str, default: ""}
  git_ref: {description: The git ref the tree came from (recorded)., type: str, default: ""}
  subdir: {description: sgl-kernel inside O(source_root)., type: str, default: ""}
  from_git: {description: Identify the tree by git's tree id instead of its content., type: bool,
             default: false}
  source_info: {description: "More of the tree's identity for the stamp (transformation, deps).",
                type: dict, default: {}}
  cache_dir: {description: The controller's source cache (archives)., type: path, required: true}
  python: {description: The build's Python on the target (the serving venv's)., type: path,
           required: true}
  package: {description: The kernel's distribution name., type: str, default: sglang-kernel}
  work_dir: {description: The build folder on the target., type: path, required: true}
  src: {description: The source folder on the target., type: path, required: true}
  stamp_file: {description: The installed build's stamp on the target., type: path, required: true}
  cuda_env_file: {description: The toolchain's environment file (nvcc)., type: path, default: ""}
  cmake_args: {description: The role's CMake arguments., type: list, elements: str, default: []}
  extra_cmake_args: {description: CMake arguments appended., type: list, elements: str,
                     default: []}
  nvcc_threads: {description: nvcc --threads per compile., type: int, default: 1}
  cuda_archs: {description: The architectures to build for., type: list, elements: str,
               default: []}
  build_env: {description: Extra build environment (part of the stamp)., type: dict, default: {}}
  ccache_dir: {description: ccache's folder on the target (empty for none)., type: path,
               default: ""}
  per_thread_gb: {description: GiB one nvcc thread may peak at., type: float, default: 4}
  reserve_gb: {description: GiB kept free for everything else., type: float, default: 4}
  max_jobs: {description: More than 0 sets the jobs exactly., type: int, default: 0}
attributes:
  check_mode:
    support: full
    description: Read-only.
  diff_mode:
    support: none
    description: Reports no diff.
  platform:
    support: full
    platforms: posix
    description: Runs on the controller and, through two read-only modules, on the target.
"""

EXAMPLES = r"""
- name: Decide whether sgl-kernel needs a build
  sglang_lxc.serving.sglang_kernel_plan:
    source_root: ~/.cache/sglang-lxc/sources/build-copies/0f1e2d3c4b5a6978-1a2b3c4d5e6f
    cache_dir: ~/.cache/sglang-lxc/sources
    python: /opt/sglang/venv/bin/python
    work_dir: /opt/sglang/build/sgl-kernel
    src: /opt/sglang/build/sgl-kernel/src
    stamp_file: /opt/sglang/venv/.sglang-lxc/sgl-kernel.json
    cuda_env_file: /etc/sglang/cuda.env
    cuda_archs: ["12.0"]
    per_thread_gb: 16
    reserve_gb: 8
  register: plan
"""

RETURN = r"""
build:
  description: Whether a build is needed.
  type: bool
  returned: success
reason:
  description: Why (or that the installed build matches its stamp).
  type: str
  returned: success
installed:
  description: The installed kernel's version on the target, or null.
  type: str
  returned: success
inputs:
  description: The build inputs, the stamp's content.
  type: dict
  returned: success
cap:
  description: The job cap and its terms (jobs, limited_by, cpus, mem_available_gib, ...).
  type: dict
  returned: success
environment:
  description: The build's environment (MAX_JOBS, CMAKE_BUILD_PARALLEL_LEVEL, CMAKE_ARGS, ...).
  type: dict
  returned: success
source_current:
  description: Whether the target already holds this source tree.
  type: bool
  returned: success
archive:
  description: The source archive on the controller.
  type: str
  returned: success
dirs:
  description: The build folders to create on the target.
  type: list
  elements: str
  returned: success
"""
