"""Filters for the local lab inventory.

Filters:
  lab_containers(count, root, first_vmid=200, subnet="10.0.3", bridge="lxcbr0", extra_mounts=None)
      -> the specs of the lab's containers ct200, ct201, ...

The logic is plugins/plugin_utils/lab_containers.py.
"""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.lab_containers import (
    lab_containers,
)


class FilterModule:
    def filters(self):
        return {"lab_containers": lab_containers}
