# Copyright: sglang-lxc contributors
# Apache-2.0
"""Action plugin sglang_kernel_cubins: the module's read of sgl_kernel's cubins, without the
module wrapper.

Every rerun of the stack role reads which architectures the installed sgl_kernel holds (from a
cache of cuobjdump's listings when the files are the same). The logic is ``answer`` in
``module_utils/sglang_kernel_cubins.py``; this action runs it bare on the target where that is
the same run as the module's (``plugin_utils/remote_python.py``), and the module otherwise.
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_kernel_cubins import (
    ARGUMENT_SPEC,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.remote_python import (
    BareModuleAction,
)


class ActionModule(BareModuleAction):
    MODULE = "sglang_lxc.serving.sglang_kernel_cubins"
    UTIL = "sglang_kernel_cubins"
    ARGUMENT_SPEC = ARGUMENT_SPEC
