# Copyright: sglang-lxc contributors
# Apache-2.0
"""Action plugin sglang_stack_probe: the module sglang_stack_probe's read, run bare.

The stack role's probe (the serving venv against the lock, the target's Python, the role's
concerns; documented in the module) is plain Python in ``module_utils/sglang_stack_probe.py``:
this action runs it on the target with one low-level command, as the action state_probe does
(``plugin_utils/remote_python.py``), and falls back to the module where that would differ.
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_stack_probe import (
    ARGUMENT_SPEC,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.remote_python import (
    BareModuleAction,
)


class ActionModule(BareModuleAction):
    MODULE = "sglang_lxc.serving.sglang_stack_probe"
    UTIL = "sglang_stack_probe"
    ARGUMENT_SPEC = ARGUMENT_SPEC
