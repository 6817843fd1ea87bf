"""Filters for the proxmox_lxc role: ``pct`` arguments and NVIDIA GPU passthrough lines.

Filters:
  pct_create_args(ct) -> the arguments after ``pct create VMID TEMPLATE``
  pct_set_args(ct, current) -> the arguments after ``pct set VMID`` (empty: nothing differs)
  nvidia_passthrough(proc_devices, dev_nodes, gpus="all") -> the ``lxc.*`` passthrough lines
  nvidia_owned_lines(current, proc_devices) -> the config's lines that passthrough manages

The logic is plugins/plugin_utils/pct_config.py and plugins/plugin_utils/lxc_gpu_passthrough.py
(the container spec checks, used by the actions, are plugins/plugin_utils/lxc_spec.py).
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.lxc_gpu_passthrough import (
    nvidia_owned_lines,
    nvidia_passthrough,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.pct_config import (
    pct_create_args,
    pct_set_args,
)


class FilterModule:
    def filters(self):
        return {
            "pct_create_args": pct_create_args,
            "pct_set_args": pct_set_args,
            "nvidia_passthrough": nvidia_passthrough,
            "nvidia_owned_lines": nvidia_owned_lines,
        }
