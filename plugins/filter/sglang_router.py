# Copyright: sglang-lxc contributors
# Apache-2.0
"""Filters of role sglang_router, over plugins/plugin_utils/router_readiness.py and
validate_router.py.

Filters:
  sglang_router_problems(vars, host)                 -> what is wrong with the role's inputs
  sglang_router_ready(result, wanted, router_url)    -> every worker healthy and a completion 200
  sglang_router_verdict(result, workers, router_url) -> '2/2 workers healthy; a completion ...'
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.router_readiness import (
    router_ready,
    router_verdict,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_router import (
    role_problems,
)


class FilterModule:
    def filters(self):
        return {
            "sglang_router_problems": role_problems,
            "sglang_router_ready": router_ready,
            "sglang_router_verdict": router_verdict,
        }
