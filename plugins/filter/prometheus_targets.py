# Copyright: sglang-lxc contributors
# Apache-2.0
"""Prometheus file_sd targets of a host's SGLang instances and router (docs/runner.md).

Filters:
  sglang_serve_metrics_targets(instances, inventory_hostname, ansible_host=None)
      -> [{"targets": ["host:port"], "labels": {...}}] for each instance with /metrics
  sglang_router_metrics_targets(bind, prometheus_port, inventory_hostname, ansible_host=None)
      -> the router's Prometheus endpoint, one entry

The logic is plugins/plugin_utils/prometheus_targets.py.
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.prometheus_targets import (
    router_targets,
    serve_targets,
)


class FilterModule:
    def filters(self):
        return {
            "sglang_serve_metrics_targets": serve_targets,
            "sglang_router_metrics_targets": router_targets,
        }
