# Copyright: sglang-lxc contributors
# Apache-2.0
"""Small builders of state_probe checks, so roles describe their state without Jinja loops.

``probe_paths`` builds ``paths`` checks and ``probe_services`` ``services`` checks, the inputs of
the host-side probe (plugins/module_utils/state_probe.py). The filters in
plugins/filter/state_probe.py wrap these. Pure Python with no Ansible import.
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
    return [{"name": str(unit), "enabled": bool(enabled), "active": bool(active)} for unit in units]
