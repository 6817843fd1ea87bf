#!/usr/bin/python
# Copyright: sglang-lxc contributors
# Apache-2.0
"""Ansible module: stop GPU workloads gracefully (SIGTERM, grace period, SIGKILL only on force)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: gpu_drain_stop
short_description: Stop the workloads that hold the GPUs, letting them checkpoint first
description:
  - Selects systemd units by name (O(units)) and/or every process holding C(/dev/nvidia*) open
    except the units matching O(keep_units) (O(gpu_holders)).
  - Units are stopped with C(systemctl stop) (SIGTERM through the unit's KillMode). A runtime
    drop-in in C(/run/systemd/system/<unit>.d/) sets C(TimeoutStopSec) to the grace period and
    C(SendSIGKILL=no) unless O(force), so systemd's own stop timeout cannot SIGKILL a workload
    that is still writing its checkpoint. Holders outside any service get SIGTERM to their
    process group.
  - Waits up to O(grace_seconds). Whatever still runs then is SIGKILLed when O(force) is true,
    otherwise left running and the module fails naming it. Never deletes anything.
  - Check mode reports what would be stopped.
options:
  units:
    description: systemd units to stop (C(.service) is appended when no suffix is given).
    type: list
    elements: str
    default: []
  gpu_holders:
    description: Also stop whatever holds C(/dev/nvidia*), except O(keep_units).
    type: bool
    default: false
  keep_units:
    description: Unit patterns (fnmatch) O(gpu_holders) never selects.
    type: list
    elements: str
    default: ["sglang@*", "sglang-router*", "nvidia-persistenced.service"]
  grace_seconds:
    description: Seconds a workload gets after SIGTERM; must be greater than 0.
    type: int
    required: true
  force:
    description: SIGKILL what still runs after the grace period. Needs a selector.
    type: bool
    default: false
  poll_seconds:
    description: How often to look whether the targets are gone.
    type: float
    default: 0.5
author:
  - sglang-lxc contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: GPU drain | Stop the trainer
  gpu_drain_stop:
    units: [trainer.service]
    grace_seconds: 300
"""

RETURN = r"""
stopped:
  description: Targets that exited within the grace period (unit or pgid, pids, seconds).
  type: list
  returned: always
killed:
  description: Targets SIGKILLed after the grace period (only with force).
  type: list
  returned: always
left_running:
  description: Targets still running after the grace period without force.
  type: list
  returned: always
kept_holders:
  description: GPU holders spared by keep_units.
  type: list
  returned: always
other_holders:
  description: GPU holders that were not targets (their GPUs stay in use).
  type: list
  returned: always
idle:
  description: Selected units that were already stopped.
  type: list
  returned: always
"""

import contextlib
import os
import signal
import time

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang_lxc.serving.plugins.module_utils.gpu_drain_plan import (
    DEFAULT_KEEP,
    DrainInputError,
    dropin_text,
    normalize_unit,
    plan,
    validate,
)
from ansible_collections.sglang_lxc.serving.plugins.module_utils.gpu_nvml import (
    scan_device_holders,
    unit_of_pid,
)

DROPIN_DIR = "/run/systemd/system"
DROPIN_NAME = "50-sglang-lxc-gpu-drain.conf"


def _ancestors():
    pids, pid = [], os.getpid()
    while pid > 1 and pid not in pids:
        pids.append(pid)
        try:
            with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
                pid = int(handle.read().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            break
    return pids


def _pgid(pid):
    try:
        return os.getpgid(pid)
    except OSError:
        return None


def _alive(pid):
    try:
        with open(f"/proc/{pid}/stat", encoding="utf-8") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _pids_by_unit():
    by_unit = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            unit = unit_of_pid(int(entry))
            if unit:
                by_unit.setdefault(unit, []).append(int(entry))
    return by_unit


class Drain:
    def __init__(self, module):
        self.module = module
        self.p = module.params
        self.systemctl = module.get_bin_path("systemctl", required=False)

    def run(self, *args, check=True):
        rc, out, err = self.module.run_command([self.systemctl, *args])
        if check and rc != 0:
            self.module.fail_json(msg=f"systemctl {' '.join(args)} failed: {err or out}")
        return rc, out

    def unit_state(self, unit):
        if not self.systemctl:
            return {"LoadState": "not-found"}
        _rc, out = self.run(
            "show", "--property=LoadState,ActiveState,SubState", "--", unit, check=False
        )
        return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)

    def done(self, target):
        """True when the target's processes are gone (and its unit is no longer active)."""
        if target["kind"] == "unit":
            state = self.unit_state(target["unit"]).get("ActiveState", "inactive")
            target["pids_now"] = _pids_by_unit().get(target["unit"], [])
            return state in ("inactive", "failed") and not target["pids_now"]
        target["pids_now"] = [pid for pid in target["pids"] if _alive(pid)]
        return not target["pids_now"]

    def send(self, target, sig):
        if target["kind"] == "unit":
            if sig == signal.SIGTERM:
                self.run("stop", "--no-block", "--", target["unit"])
                target["how"] = "systemctl stop"
                return
            self.run(
                "kill", "--kill-whom=all", "--signal=SIGKILL", "--", target["unit"], check=False
            )
            pids = target.get("pids_now", [])  # also leftovers of a unit systemd gave up on
            target["how"] += ", SIGKILL"
        else:
            pids = []
            with contextlib.suppress(ProcessLookupError):
                os.killpg(target["pgid"], sig)
            target["how"] = (
                "SIGTERM to process group"
                if sig == signal.SIGTERM
                else (target["how"] + ", SIGKILL")
            )
        for pid in pids:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)

    def wait(self, pending, until, start, into):
        """Poll until every target is done or ``until``; done ones go to ``into``."""
        while True:
            still = []
            for target in pending:
                if self.done(target):
                    target["seconds"] = round(time.monotonic() - start, 1)
                    into.append(target)
                else:
                    still.append(target)
            pending = still
            if not pending or time.monotonic() >= until:
                return pending
            time.sleep(self.p["poll_seconds"])

    def write_dropin(self, unit):
        directory = os.path.join(DROPIN_DIR, f"{unit}.d")
        path = os.path.join(directory, DROPIN_NAME)
        text = dropin_text(self.p["grace_seconds"], self.p["force"])
        try:
            with open(path, encoding="utf-8") as handle:
                if handle.read() == text:
                    return False
        except OSError:
            pass
        os.makedirs(directory, mode=0o755, exist_ok=True)
        tmp = path + ".tmp"
        with open(tmp, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
        return True

    def main(self):
        p = self.p
        try:
            validate(p["units"], p["gpu_holders"], p["grace_seconds"], p["force"])
        except DrainInputError as exc:
            self.module.fail_json(msg=str(exc))
        units = [normalize_unit(u) for u in p["units"]]
        own = _ancestors()
        holders = scan_device_holders(exclude_pids=own)
        by_unit = _pids_by_unit()
        states = {u: self.unit_state(u) for u in units}
        chosen = plan(
            units, p["gpu_holders"], p["keep_units"], states, by_unit, holders, own, _pgid
        )
        target_pids = {pid for t in chosen["units"] + chosen["groups"] for pid in t["pids"]}
        result = {
            "changed": bool(chosen["units"] or chosen["groups"]),
            "planned": chosen["units"] + chosen["groups"],
            "stopped": [],
            "killed": [],
            "left_running": [],
            "kept_holders": chosen["kept"],
            "other_holders": [h for h in holders if h["pid"] not in target_pids],
            "idle": chosen["idle"],
            "dropins": [],
        }
        for warning in chosen["warnings"]:
            self.module.warn(warning)
        if self.module.check_mode or not result["changed"]:
            self.module.exit_json(**result)
        if chosen["units"] and not self.systemctl:  # units need systemd
            self.module.fail_json(msg="systemctl not found: cannot stop units", **result)

        # 1. systemd must not SIGKILL on its own stop timeout unless force
        written = [t["unit"] for t in chosen["units"] if self.write_dropin(t["unit"])]
        if written:
            self.run("daemon-reload")
            result["dropins"] = written
        # 2. SIGTERM everything at once (the workers of one job stop together)
        start = time.monotonic()
        pending = chosen["units"] + chosen["groups"]
        for target in pending:
            self.send(target, signal.SIGTERM)
        # 3. the grace period: time to write the checkpoint
        pending = self.wait(pending, start + p["grace_seconds"], start, result["stopped"])
        # 4. SIGKILL only on force
        if pending and p["force"]:
            for target in pending:
                self.send(target, signal.SIGKILL)
            pending = self.wait(pending, time.monotonic() + 15, start, result["killed"])
        result["left_running"] = pending
        if pending:
            names = "; ".join(
                f"{t.get('unit') or 'pgid ' + str(t['pgid'])} (pid(s) "
                f"{', '.join(map(str, t.get('pids_now') or t['pids']))})"
                for t in pending
            )
            if p["force"]:
                msg = f"still running after SIGKILL: {names}"
            else:
                msg = (
                    f"still running {p['grace_seconds']} s after SIGTERM: {names}. Left running, "
                    "nothing was killed. Let it finish, stop it yourself, raise "
                    "gpu_drain_grace_seconds, or rerun with gpu_drain_force: true to SIGKILL it."
                )
            self.module.fail_json(msg=msg, **result)
        self.module.exit_json(**result)


def main():
    module = AnsibleModule(
        argument_spec={
            "units": {"type": "list", "elements": "str", "default": []},
            "gpu_holders": {"type": "bool", "default": False},
            "keep_units": {"type": "list", "elements": "str", "default": DEFAULT_KEEP},
            "grace_seconds": {"type": "int", "required": True},
            "force": {"type": "bool", "default": False},
            "poll_seconds": {"type": "float", "default": 0.5},
        },
        supports_check_mode=True,
    )
    Drain(module).main()


if __name__ == "__main__":
    main()
