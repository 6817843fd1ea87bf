# Copyright: sglang-lxc contributors
# Apache-2.0
"""Small builders of state_probe checks, over plugins/plugin_utils/state_probe_checks.py.

Filters:
  probe_paths(paths, state='directory', owner='', group='', mode='') -> ``paths`` checks
  probe_services(units, enabled=True, active=True)                   -> ``services`` checks
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.state_probe_checks import (
    probe_paths,
    probe_services,
)


class FilterModule:
    def filters(self):
        return {"probe_paths": probe_paths, "probe_services": probe_services}
