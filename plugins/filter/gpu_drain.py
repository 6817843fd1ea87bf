# Copyright: sglang-lxc contributors
# Apache-2.0
"""Filters for the gpu_drain role: has the GPU memory come back, and a one-line summary.

  gpu_drain_memory_state(after, before, drain, idle_mib=1024) -> {released, waiting, freed_mib,
                                                                   watched}
  gpu_drain_summary(drain, memory=None, memory_skip_reason=None) -> "2 processes stopped (...)"
  gpu_drain_memory_skip(drain, before, check_mode, wait_seconds, nvml_enabled) -> "" or why the
                                                                                 wait is skipped

The logic is plugins/plugin_utils/gpu_drain.py (memory_state, summary, memory_skip).
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.gpu_drain import (
    memory_skip,
    memory_state,
    summary,
)


class FilterModule:
    def filters(self):
        return {
            "gpu_drain_memory_state": memory_state,
            "gpu_drain_summary": summary,
            "gpu_drain_memory_skip": memory_skip,
        }
