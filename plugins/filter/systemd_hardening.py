# Copyright: sglang-lxc contributors
# Apache-2.0
"""The systemd sandbox shared by every SGLang unit (sglang@.service and sglang-router.service).

Filters:
  sglang_unit_hardening(overrides={}) -> ["CapabilityBoundingSet=", "LockPersonality=yes", ...]

The logic, and ``HARDENING`` (the settings' one home), is plugins/plugin_utils/systemd_hardening.py.
"""

from __future__ import annotations

from typing import Any

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.systemd_hardening import (
    sglang_unit_hardening,
)


class FilterModule:
    """Shared systemd hardening of the SGLang units."""

    def filters(self) -> dict[str, Any]:
        return {"sglang_unit_hardening": sglang_unit_hardening}
