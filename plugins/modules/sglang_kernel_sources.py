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
  - Runs on the controller, for each host, before anything changes on a target. Hosts that ask
    for the same O(cuda_archs) share one build copy; another set gets a copy of its own, with its
    own configured-build check (RV(check_args)).
  - Holds the source cache's lock (C(<cache_dir>/.sglang-lxc-sources.lock), an exclusive flock
    naming its holder's pid, host and start time) around the clone's fetch and checkout, the build
    copy, every dependency's fetch and the archives. A second run waits, saying which lock and
    which run holds it, up to O(lock_wait) seconds; a lock left by a killed run is taken over, its
    half-made folders removed.
  - With O(git_url), the clone O(clone_dir) is fetched at O(git_ref) and checked out first.
  - With O(prune_keep) >= 0 it only prunes instead - build copies (and their archives) beyond the
    newest O(prune_keep) by last use are removed; those in O(in_use) are always kept.
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
    default: ""
  cache_dir:
    description: The controller's source cache (build copies, dependencies, git mirrors, archives).
    type: path
    required: true
  work_dir:
    description: The build folder on the target (the CMake arguments name paths under it).
    type: path
    default: ""
  cuda_archs:
    description:
      - The architectures to build for (C(12.0) gives C(sm_120a)).
      - Required, like O(source_tree) and O(work_dir), unless O(prune_keep) >= 0.
    type: list
    elements: str
    default: []
  cmake_args:
    description: The role's CMake arguments; the C(-D<NAME>=OFF) ones leave their targets out.
    type: list
    elements: str
    default: []
  git_url_rewrites:
    description: Mirror prefix to the upstream prefix it replaces (git's C(url.<base>.insteadOf)).
    type: dict
    default: {}
  git_url:
    description: The repository of O(source_tree)'s clone; V("") when the tree is a folder.
    type: str
    default: ""
  git_ref:
    description: The branch, tag or commit of O(git_url) to check out.
    type: str
    default: ""
  clone_dir:
    description: The clone's folder in the cache (O(source_tree) is in it).
    type: path
    default: ""
  lock_wait:
    description: Seconds to wait for another run's lock on the cache before failing.
    type: int
    default: 1800
  prune_keep:
    description: V(-1) brings the sources; V(0) or more prunes the build copies beyond this many.
    type: int
    default: -1
  in_use:
    description: Build copies the play's hosts use, never pruned.
    type: list
    elements: path
    default: []
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

- name: Keep the two newest build copies and the ones in use
  sglang_lxc.serving.sglang_kernel_sources:
    cache_dir: ~/.cache/sglang-lxc/sources
    prune_keep: 2
    in_use: ["{{ __sources.build_copy }}"]
  run_once: true
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
commit:
  description: The commit the clone was checked out at (with O(git_url)).
  type: str
  returned: success and git_url given
lock_waited_s:
  description: Seconds spent waiting for another run's lock on the cache.
  type: float
  returned: always
lock_took_over:
  description: The killed run whose lock was taken over (its record, the half-made folders removed).
  type: dict
  returned: when a stale lock was found
removed:
  description: The build copies pruned.
  type: list
  elements: str
  returned: prune_keep >= 0
kept:
  description: The build copies kept.
  type: list
  elements: str
  returned: prune_keep >= 0
freed_bytes:
  description: Disk space the pruned copies and their archives took.
  type: int
  returned: prune_keep >= 0
missing:
  description: The pins that could not be had (repository, commit, CMake file and line, folder).
  type: list
  elements: dict
  returned: failure
"""
