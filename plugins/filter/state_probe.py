# Copyright: sglang-lxc contributors
# Apache-2.0
"""Small builders of state_probe checks, so roles describe their state without Jinja loops.

Filters:
  probe_paths(paths, state='directory', owner='', group='', mode='') -> ``paths`` checks
  probe_services(units, enabled=True, active=True)                   -> ``services`` checks

Pure Python with no Ansible import at module level, so tests import it directly.
"""

from __future__ import annotations


def probe_paths(paths, state="directory", owner="", group="", mode=""):
    """One ``paths`` check per path, with the same state, owner, group and mode."""
    out = []
    for path in paths:
        spec = {"path": str(path), "state": state}
        for key, value in (("owner", owner), ("group", group), ("mode", mode)):
            if value not in (None, ""):
                spec[key] = str(value)
        out.append(spec)
    return out


def probe_services(units, enabled=True, active=True):
    """One ``services`` check per systemd unit."""
    return [{"name": str(unit), "enabled": bool(enabled), "active": bool(active)}
            for unit in units]


class FilterModule:
    def filters(self):
        return {"probe_paths": probe_paths, "probe_services": probe_services}
