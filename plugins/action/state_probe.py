# Copyright: sglang-lxc contributors
# Apache-2.0
"""Action plugin state_probe: the module state_probe's read, without the module wrapper.

The module state_probe (documented there) reads a role's whole state in one pass; every role's
probe on every rerun is one. Its logic is plain Python (``module_utils/state_probe.py``), so
this action checks the arguments against the module's spec on the controller and runs the
probe's ``answer`` on the target with one low-level command (``plugin_utils/remote_python.py``):
about 0.18 s less per probe than the module, same answer. Where that cannot be the same run as
the module's (no pipelining, an interpreter to discover, an ``environment``, async), the module
runs as usual.
"""

from __future__ import annotations

from ansible.plugins.action import ActionBase
from ansible_collections.sglang_lxc.serving.plugins.module_utils.state_probe import ARGUMENT_SPEC
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import remote_python

MODULE = "sglang_lxc.serving.state_probe"


class ActionModule(ActionBase):
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        python = remote_python.fast_path(self, task_vars)
        if python is None:
            result.update(self._execute_module(module_name=MODULE, module_args=self._task.args,
                                               task_vars=task_vars))
            return result
        params, errors = remote_python.validate(ARGUMENT_SPEC, self._task.args)
        if errors:
            result.update(failed=True, msg=f"{MODULE}: " + "; ".join(errors))
            return result
        result.update(remote_python.run(self, python, remote_python.PACKAGE + "state_probe",
                                        "answer", params))
        return result
