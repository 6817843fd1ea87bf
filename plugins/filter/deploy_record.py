# Copyright: sglang-lxc contributors
# Apache-2.0
"""The deploy record of a role (roles/deploy_record), over plugins/plugin_utils/deploy_record.py.

Filters:
  deploy_record_body(role, status, reason, version, inputs, published) -> the record less ``time``
  deploy_record_concern(body, record_dir) -> the ``record`` concern for state_probe
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.deploy_record import (
    deploy_record_body,
    deploy_record_concern,
)


class FilterModule:
    def filters(self):
        return {
            "deploy_record_body": deploy_record_body,
            "deploy_record_concern": deploy_record_concern,
        }
