#!/usr/bin/python
# Copyright: sglang-lxc contributors
# Apache-2.0
"""Ansible module: GPU facts through NVML (nvidia-ml-py) plus /dev/nvidia* holders from /proc."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: nvml_facts
short_description: Read GPUs through NVML and find processes holding /dev/nvidia*
description:
  - Reports the NVIDIA driver version, the CUDA driver version and, per GPU, index, name,
    UUID, compute capability, memory total/used, utilization, PCIe generation and width, and
    the processes NVML lists on it (pid, GPU memory, command line, systemd unit).
  - Also lists every process of this PID namespace that holds a C(/dev/nvidia*) handle open,
    with its systemd unit. Inside an LXC container NVML lists host PIDs, or none, so this is
    the reliable way to see who uses the GPUs there.
  - Never fails for a missing driver or library, or a missing pynvml; C(gpus) is then empty
    and C(nvml_error) says why.
  - Read-only; supports check mode.
options:
  disk_paths:
    description: Paths whose free disk space to report (nearest existing parent is measured).
    type: list
    elements: str
    default: []
requirements:
  - nvidia-ml-py (import name C(pynvml)) in the Python that runs the module
author:
  - sglang-lxc contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: GPU | Read NVML
  nvml_facts:
    disk_paths: [/srv/models]
  vars:
    ansible_python_interpreter: /opt/sglang/gpu-tools/bin/python
"""

RETURN = r"""
ansible_facts:
  description: C(gpu_nvml) holds everything below.
  returned: always
  type: dict
  contains:
    gpu_nvml:
      description: >-
        pynvml_available, nvml_available, nvml_error, driver_version, cuda_driver_version,
        cuda_driver_major, gpu_count, gpus (list), holders (list), host (memory, cpus, disks),
        python (interpreter that ran the module).
      type: dict
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang_lxc.serving.plugins.module_utils.gpu_nvml import (
    ARGUMENT_SPEC,
    answer,
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**answer(**module.params))


if __name__ == "__main__":
    main()
