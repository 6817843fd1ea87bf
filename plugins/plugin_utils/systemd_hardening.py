# Copyright: sglang-lxc contributors
# Apache-2.0
"""One systemd sandbox for every SGLang unit (sglang@.service and sglang-router.service).

  sglang_unit_hardening(overrides={}) -> ["CapabilityBoundingSet=", "LockPersonality=yes", ...]

``HARDENING`` is the only place the settings are written; the roles' ``*_hardening`` variables
hold changes on top of it (a key set to null drops that setting). The templates print the lines
under [Service]; tests/unit/serve/test_units.py checks both units carry the same set.
MemoryDenyWriteExecute stays off: CUDA and Triton JIT write executable memory.

Controller side, plain Python: the filter ``sglang_unit_hardening``
(plugins/filter/systemd_hardening.py) wraps it for the templates.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from ansible.errors import AnsibleFilterError

HARDENING: dict[str, str] = {
    "NoNewPrivileges": "yes",
    "ProtectSystem": "strict",
    "ProtectHome": "yes",
    "PrivateTmp": "yes",
    "ProtectProc": "invisible",
    "ProtectKernelTunables": "yes",
    "ProtectKernelModules": "yes",
    "ProtectKernelLogs": "yes",
    "ProtectControlGroups": "yes",
    "ProtectClock": "yes",
    "ProtectHostname": "yes",
    "RestrictSUIDSGID": "yes",
    "RestrictRealtime": "yes",
    "RestrictNamespaces": "yes",
    "LockPersonality": "yes",
    "SystemCallArchitectures": "native",
    "CapabilityBoundingSet": "",
    "AmbientCapabilities": "",
    "RestrictAddressFamilies": "AF_UNIX AF_INET AF_INET6 AF_NETLINK",
}


def _text(value: Any) -> str:
    if isinstance(value, bool):
        return "yes" if value else "no"
    return str(value)


def sglang_unit_hardening(overrides: Mapping[str, Any] | None = None) -> list[str]:
    """``Key=value`` lines of the shared sandbox with ``overrides`` applied, sorted by key."""
    if overrides is None:
        overrides = {}
    if not isinstance(overrides, Mapping):
        raise AnsibleFilterError(
            f"hardening overrides must be a mapping of systemd setting: value, got {overrides!r}"
        )
    settings: dict[str, Any] = {**HARDENING, **overrides}
    lines = []
    for key in sorted(settings):
        value = settings[key]
        if value is None:
            continue
        text = _text(value)
        if not str(key).isalnum() or "\n" in text or "\r" in text:
            raise AnsibleFilterError(f"bad systemd hardening setting {key!r}: {value!r}")
        lines.append(f"{key}={text}")
    return lines
