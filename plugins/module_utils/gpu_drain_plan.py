# Copyright: sglang-lxc contributors
# Apache-2.0
"""Which workloads a GPU drain stops.

Pure logic for the ``gpu_drain_stop`` module: no Ansible, no systemd, no signals here; the
module passes in what it read from systemctl and /proc. (Whether the memory came back is
judged on the controller: plugins/plugin_utils/gpu_drain.py.)
"""

from __future__ import annotations

import fnmatch
import re

UNIT_NAME = re.compile(r"^[A-Za-z0-9:_.@\\-]+$")
DEFAULT_KEEP = ["sglang@*", "sglang-router*", "nvidia-persistenced.service"]


class DrainInputError(ValueError):
    """Bad input, found before anything is stopped; the text names the variable."""


def normalize_unit(name):
    name = name.strip()
    if not name.endswith((".service", ".scope")):
        name += ".service"
    return name


def validate(units, gpu_holders, grace_seconds, force, memory_wait_seconds=0):
    """Raise DrainInputError for input the drain must refuse before it touches anything."""
    errors = []
    if grace_seconds is None or int(grace_seconds) <= 0:
        errors.append(
            f"gpu_drain_grace_seconds must be greater than 0 (got {grace_seconds}): it is the "
            "time a workload gets after SIGTERM to write its checkpoint"
        )
    if force and not units and not gpu_holders:
        errors.append(
            "gpu_drain_force: true needs a selector: name the units in gpu_drain_units or set "
            "gpu_drain_gpu_holders: true; force never applies to an unnamed set"
        )
    for unit in units or []:
        if not UNIT_NAME.match(str(unit)) or any(ch in str(unit) for ch in "*?["):
            errors.append(
                f"gpu_drain_units: {unit!r} is not a systemd unit name (exact names, no "
                "patterns; gpu_drain_gpu_holders selects whatever holds the GPUs)"
            )
    if memory_wait_seconds is not None and int(memory_wait_seconds) < 0:
        errors.append(
            f"gpu_drain_memory_wait_seconds must be 0 or more (got {memory_wait_seconds})"
        )
    if errors:
        raise DrainInputError("; ".join(errors))


def is_kept(unit, keep_patterns):
    return unit is not None and any(fnmatch.fnmatchcase(unit, p) for p in keep_patterns)


def plan(units, gpu_holders, keep_patterns, unit_states, unit_pids, holders, own_pids, pgid_of):
    """Decide the targets.

    units: explicit unit names (normalised); gpu_holders: also take every /dev/nvidia* holder
    except ``keep_patterns``; unit_states: {unit: {"LoadState", "ActiveState", "SubState"}} for
    the explicit units; unit_pids: {unit: [pid]} for every unit seen in /proc; holders:
    gpu_nvml.scan_device_holders(); own_pids: this process and its ancestors, never touched;
    pgid_of: pid -> process group id (or None).

    Returns {"units": [...], "groups": [...], "kept": [...], "idle": [...], "warnings": [...]}.
    A unit target: {"unit", "pids", "gpu_minors", "active_state", "selected_by"}; a group target
    (a holder outside any service, e.g. started from a shell): {"pgid", "pids", "cmdline",
    "gpu_minors", "unit", "selected_by"}.
    """
    own = set(own_pids)
    minors_by_pid = {h["pid"]: h["gpu_minors"] for h in holders}
    targets, groups, kept, idle, warnings = {}, {}, [], [], []

    def unit_target(unit, state, selected_by):
        pids = sorted(p for p in unit_pids.get(unit, []) if p not in own)
        minors = sorted({m for p in pids for m in minors_by_pid.get(p, [])})
        targets.setdefault(
            unit,
            {
                "kind": "unit",
                "unit": unit,
                "pids": pids,
                "gpu_minors": minors,
                "active_state": state,
                "selected_by": selected_by,
            },
        )

    for unit in units:
        state = unit_states.get(unit, {})
        active = state.get("ActiveState", "inactive")
        if state.get("LoadState") == "not-found" and not unit_pids.get(unit):
            warnings.append(f"gpu_drain_units: {unit} matched nothing (no such unit)")
        elif active in ("inactive", "failed") and not unit_pids.get(unit):
            idle.append({"unit": unit, "active_state": active})
        else:
            unit_target(unit, active, "gpu_drain_units")

    if gpu_holders:
        for holder in holders:
            pid, unit = holder["pid"], holder["unit"]
            if pid in own:
                continue
            if is_kept(unit, keep_patterns):
                kept.append(
                    {
                        "pid": pid,
                        "unit": unit,
                        "cmdline": holder["cmdline"],
                        "gpu_minors": holder["gpu_minors"],
                    }
                )
                continue
            if unit and unit.endswith(".service"):
                unit_target(unit, "active", "gpu_drain_gpu_holders")
                continue
            pgid = pgid_of(pid)
            if pgid is None or pgid <= 1 or any(pgid_of(o) == pgid for o in own):
                warnings.append(
                    f"gpu_drain_gpu_holders: pid {pid} ({holder['cmdline']}) holds the GPUs "
                    "outside any service and shares our process group; not signalled"
                )
                continue
            group = groups.setdefault(
                pgid,
                {
                    "kind": "group",
                    "pgid": pgid,
                    "pids": [],
                    "cmdline": holder["cmdline"],
                    "gpu_minors": [],
                    "unit": unit,
                    "selected_by": "gpu_drain_gpu_holders",
                },
            )
            group["pids"].append(pid)
            group["gpu_minors"] = sorted(set(group["gpu_minors"]) | set(holder["gpu_minors"]))
        if not targets and not groups:
            warnings.append(
                "gpu_drain_gpu_holders: nothing outside the kept units holds /dev/nvidia*"
                + (f" (kept: {', '.join(sorted({k['unit'] for k in kept}))})" if kept else "")
            )
    if not units and not gpu_holders:
        warnings.append("no workload selected: set gpu_drain_units or gpu_drain_gpu_holders: true")
    return {
        "units": sorted(targets.values(), key=lambda t: t["unit"]),
        "groups": sorted(groups.values(), key=lambda g: g["pgid"]),
        "kept": kept,
        "idle": idle,
        "warnings": warnings,
    }


def dropin_text(grace_seconds, force):
    """Runtime drop-in for a unit being drained: systemd's own stop timeout must not SIGKILL
    a workload that is still writing its checkpoint unless force was asked for."""
    return (
        "# Written by sglang-lxc gpu_drain (runtime only, gone at reboot).\n"
        "# SIGTERM, then wait; SIGKILL only when the drain runs with gpu_drain_force: true.\n"
        "[Service]\n"
        f"TimeoutStopSec={int(grace_seconds)}s\n"
        f"SendSIGKILL={'yes' if force else 'no'}\n"
    )
