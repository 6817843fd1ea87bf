# Copyright: sglang-lxc contributors
# Apache-2.0
"""Action plugin nvml_facts: the module nvml_facts's read, without the module wrapper.

Every rerun reads NVML on every serving host (preflight), under the tools venv's Python that the
role names as the task's interpreter. The module's logic is ``answer`` in
``module_utils/gpu_nvml.py``, so this action runs it bare on the target where that is the same
run as the module's (``plugin_utils/remote_python.py``), and the module otherwise.
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.module_utils.gpu_nvml import ARGUMENT_SPEC
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.remote_python import (
    BareModuleAction,
)


class ActionModule(BareModuleAction):
    MODULE = "sglang_lxc.serving.nvml_facts"
    UTIL = "gpu_nvml"
    ARGUMENT_SPEC = ARGUMENT_SPEC
