# Copyright: sglang-lxc contributors
# Apache-2.0
"""Preflight verdicts for a serving container, from ``nvml_facts`` output (role gpu_facts).

Filters:
  gpu_preflight_verdicts(gpu_nvml, checks) -> list of verdicts
  gpu_preflight_failed(verdicts)          -> the verdicts whose status is "fail"
  gpu_preflight_report(verdicts)          -> one line per verdict, for people
  gpu_preflight_summary(verdicts)         -> one line for the runner's checklist

The logic, and what a verdict and ``checks`` hold, is plugins/plugin_utils/gpu_preflight.py.
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.gpu_preflight import (
    gpu_preflight_failed,
    gpu_preflight_report,
    gpu_preflight_summary,
    gpu_preflight_verdicts,
)


class FilterModule:
    def filters(self):
        return {
            "gpu_preflight_verdicts": gpu_preflight_verdicts,
            "gpu_preflight_failed": gpu_preflight_failed,
            "gpu_preflight_report": gpu_preflight_report,
            "gpu_preflight_summary": gpu_preflight_summary,
        }
