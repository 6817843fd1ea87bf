#!/usr/bin/python
# Copyright: sglang-lxc contributors
# Apache-2.0
"""Documentation of the sglang_kernel_build action (the work is done by the action plugin)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_kernel_build
short_description: Build the sgl-kernel wheel detached on the target, one build per slot
description:
  - Starts O(script) detached (setsid) in O(work_dir) with O(environment), polls it every O(poll)
    seconds and prints progress (C([done/total]) objects from the build log, or its last line).
  - Holds a lock file named after O(slot) on the controller for the whole build, so builds that
    share a slot (containers on one Proxmox node) never overlap, across hosts and across runs.
  - Stops the build (its whole process group) and fails after O(timeout) seconds.
  - Never installs anything; the script leaves one wheel in O(work_dir)/dist, returned as C(wheel).
options:
  script:
    description: Build script on the target.
    type: path
    required: true
  work_dir:
    description: Target folder for build.log, build.status, build.pid and dist/.
    type: path
    required: true
  environment:
    description: Environment of the build.
    type: dict
    default: {}
  timeout:
    description: Seconds the build may run (and, separately, wait for its slot).
    type: int
    default: 14400
  poll:
    description: Seconds between progress polls.
    type: int
    default: 30
  slot:
    description: Builds with the same slot run one at a time.
    type: str
    default: all
  lock_dir:
    description: Controller folder of the slot lock files.
    type: path
    default: ~/.cache/sglang-lxc/locks
attributes:
  check_mode:
    support: full
    description: Reports that a build would run; starts nothing.
author:
  - sglang-lxc contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: SGLang | Build sgl-kernel
  sglang_kernel_build:
    script: /opt/sglang/build/sgl-kernel/build-wheel.sh
    work_dir: /opt/sglang/build/sgl-kernel
    environment:
      MAX_JOBS: "8"
    slot: kpro6
"""

RETURN = r"""
wheel:
  description: Path of the built wheel on the target.
  type: str
  returned: success
rc:
  description: Exit status of the build script.
  type: int
  returned: always
elapsed_s:
  description: Seconds the build ran.
  type: float
  returned: always
log_tail:
  description: Last lines of the build log.
  type: list
  elements: str
  returned: always
"""
