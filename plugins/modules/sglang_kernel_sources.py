#!/usr/bin/python
# Copyright: sglang-lxc contributors
# Apache-2.0 (see galaxy.yml)

# Documentation only: the work is done by the action plugin of the same name
# (plugins/action/sglang_kernel_sources.py), on the controller.

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_kernel_sources
short_description: Bring sgl-kernel's sources and every FetchContent pin into the controller's cache
description:
  - Runs on the controller, once per source tree, before anything changes on a target.
  - Makes a build copy of O(source_tree) with the SM120-only transformation (only the gencodes of
    O(cuda_archs) stay; the FA3 override, the sm90 copy, FA3's and FlashMLA's targets are left out,
    each named in the result); the tree itself is never changed. A form the transformation does not
    know fails naming the file and line.
  - Reads every C(FetchContent_Declare) the build copy still uses, and those of the dependencies it
    builds with C(add_subdirectory), from the tree's own CMake files, and fetches each at its pinned
    commit into O(cache_dir)C(/deps), through git with O(git_url_rewrites) as git's
    C(url.<base>.insteadOf) (a mirror). A pin that cannot be had fails the task naming the
    repository, the commit and the folder to fill.
  - Returns the archives to unpack on the target and the CMake arguments that point FetchContent at
    them (C(FETCHCONTENT_SOURCE_DIR_<NAME>), C(FETCHCONTENT_FULLY_DISCONNECTED=ON)).
  - In check mode nothing is fetched or written; a new build copy is reported as a change.
version_added: 0.1.0
author:
  - sglang-lxc contributors (!UNKNOWN)
options:
  source_tree:
    description: The sgl-kernel folder on the controller (a clone's C(sgl-kernel/), or a folder).
    type: path
    required: true
  cache_dir:
    description: The controller's source cache (build copies, dependencies, git mirrors, archives).
    type: path
    required: true
  work_dir:
    description: The build folder on the target (the CMake arguments name paths under it).
    type: path
    required: true
  cuda_archs:
    description: The architectures to build for (C(12.0) gives C(sm_120a)).
    type: list
    elements: str
    required: true
  cmake_args:
    description: The role's CMake arguments; the C(-D<NAME>=OFF) ones leave their targets out.
    type: list
    elements: str
    default: []
  git_url_rewrites:
    description: Mirror prefix to the upstream prefix it replaces (git's C(url.<base>.insteadOf)).
    type: dict
    default: {}
attributes:
  check_mode:
    support: full
    description: Fetches and writes nothing; reports a new build copy as a change.
  diff_mode:
    support: none
    description: Reports no diff.
  platform:
    support: full
    platforms: posix
    description: Runs on the controller.
"""

EXAMPLES = r"""
- name: Bring sgl-kernel's sources into the controller's cache (mirrors for every repository)
  sglang_lxc.serving.sglang_kernel_sources:
    source_tree: ~/.cache/sglang-lxc/sources/sglang/sgl-kernel
    cache_dir: ~/.cache/sglang-lxc/sources
    work_dir: /opt/sglang/build/sgl-kernel
    cuda_archs: ["12.0"]
    cmake_args: [-DENABLE_BELOW_SM90=OFF, -DSGL_KERNEL_ENABLE_FA3=OFF]
    git_url_rewrites:
      "file:///srv/mirrors/": "https://github.com/"
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
build_copy:
  description: The transformed copy of the tree the build uses.
  type: str
  returned: success
archive:
  description: The build copy's archive, unpacked on the target.
  type: str
  returned: success
transform:
  description: What the transformation kept and left out (architectures, targets with reasons).
  type: dict
  returned: success
deps:
  description: Each FetchContent source (name, ref, folder, archive, target folder).
  type: list
  elements: dict
  returned: success
cmake_args:
  description: The CMake arguments that point FetchContent at the unpacked sources.
  type: list
  elements: str
  returned: success
check_args:
  description: Arguments of the configured-build check (the allowed architectures, where to look).
  type: str
  returned: success
source_info:
  description: What goes into the build stamp (transformation, dependency refs, left-out targets).
  type: dict
  returned: success
missing:
  description: The pins that could not be had (repository, commit, CMake file and line, folder).
  type: list
  elements: dict
  returned: failure
"""
