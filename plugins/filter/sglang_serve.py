# Copyright: sglang-lxc contributors
# Apache-2.0
"""Filters of the sglang_serve role, over plugins/plugin_utils/serve_instances.py.

Filters:
  sglang_serve_settings(vars)       -> the role's settings from its variables (sglang_serve_*)
  sglang_serve_instances(settings, gpu_count, has_api_key=False) -> the checked, resolved instances
  sglang_serve_endpoints(instances) -> their worker URLs, for a router in front of them
  sglang_serve_deployed(instances)  -> the instances as the deploy record holds them
  sglang_serve_describe(instance)   -> 'sglang@gpu0.service: GPU 0 (tp 1), 127.0.0.1:30000, m'
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.serve_instances import (
    role_settings as sglang_serve_settings,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.serve_instances import (
    sglang_serve_deployed,
    sglang_serve_describe,
    sglang_serve_endpoints,
    sglang_serve_instances,
)


class FilterModule:
    def filters(self):
        return {
            "sglang_serve_settings": sglang_serve_settings,
            "sglang_serve_instances": sglang_serve_instances,
            "sglang_serve_endpoints": sglang_serve_endpoints,
            "sglang_serve_deployed": sglang_serve_deployed,
            "sglang_serve_describe": sglang_serve_describe,
        }
