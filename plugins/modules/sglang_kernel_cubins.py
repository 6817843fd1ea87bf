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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_kernel_cubins import (
    ARGUMENT_SPEC,
    answer,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result = answer(**module.params)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
