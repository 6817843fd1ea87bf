# Copyright: sglang-lxc contributors
# Apache-2.0
"""Action plugin sglang_readiness: one readiness round, without the module wrapper.

Every rerun of the serving role looks at every instance once (a converged instance answers its
scheduler's /server_info in milliseconds; the AnsiballZ wrapper cost about 0.18 s of the
task). The logic is ``answer`` in ``module_utils/sglang_readiness.py``; this action runs it bare
on the target where that is the same run as the module's (``plugin_utils/remote_python.py``),
and the module otherwise. ``api_key`` is ``no_log``: its value is masked in the answer, as
AnsibleModule masks it.
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_readiness import (
    ARGUMENT_SPEC,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.remote_python import (
    BareModuleAction,
)


class ActionModule(BareModuleAction):
    MODULE = "sglang_lxc.serving.sglang_readiness"
    UTIL = "sglang_readiness"
    ARGUMENT_SPEC = ARGUMENT_SPEC
