# Copyright: sglang-lxc contributors
# Apache-2.0
"""Action plugin state_probe: the module state_probe's read, without the module wrapper.

The module state_probe (documented there) reads a role's whole state in one pass; every role's
probe on every rerun is one. Its logic is plain Python (``module_utils/state_probe.py``), so
this action checks the arguments against the module's spec on the controller and runs the
probe's ``answer`` on the target with one low-level command (``plugin_utils/remote_python.py``):
about 0.1-0.18 s less per probe than the module, same answer. Where that cannot be the same run
as the module's (no pipelining, an interpreter to discover, an ``environment``, async), the
module runs as usual.
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.module_utils.state_probe import ARGUMENT_SPEC
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.remote_python import (
    BareModuleAction,
)


class ActionModule(BareModuleAction):
    MODULE = "sglang_lxc.serving.state_probe"
    UTIL = "state_probe"
    ARGUMENT_SPEC = ARGUMENT_SPEC
