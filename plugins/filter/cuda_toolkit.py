# Copyright: sglang-lxc contributors
# Apache-2.0
"""cuda_toolkit's input checks, all at once and before anything changes.

Filter:
  cuda_toolkit_problems(settings) -> one message per problem, [] when the inputs are sound

The logic, and what ``settings`` holds, is plugins/plugin_utils/cuda_toolkit.py.
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.cuda_toolkit import (
    cuda_toolkit_problems,
)


class FilterModule:
    def filters(self):
        return {"cuda_toolkit_problems": cuda_toolkit_problems}
