#!/usr/bin/python
"""Ansible module: one readiness round over SGLang instances run by systemd."""

from __future__ import annotations

import ctypes
import http.client
import json
import os
import socket
import subprocess
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
---
module: sglang_readiness
short_description: Tell loading from hung from crashed SGLang instances, one round at a time
description:
  - Polls every instance for at most O(interval) seconds and returns each one's state
    (C(healthy), C(loading), C(warming), C(hung), C(crashed)) with elapsed times, so a play can
    print progress between rounds and call the module again with the returned O(state).
  - C(healthy) needs C(/health) 200 and the served model name listed on C(/v1/models).
  - C(crashed) when the unit is failed, inactive, waiting to auto-restart, or restarted since the
    first round; the result carries the last log lines from the journal.
  - C(hung) when the process is alive but shows no progress for O(stall_timeout) seconds.
    Progress evidence is any change of port state, HTTP status, number of log lines of the
    current invocation, disk bytes read by the unit's processes, or GPU memory used (NVML,
    when the driver library loads).
options:
  instances:
    description: Resolved instances (name, unit, port, probe_host, gpus, served_model_name).
    type: list
    elements: dict
    required: true
  api_key:
    description: Bearer token for C(/v1/models).
    type: str
    default: ""
  interval:
    description: Seconds this call may spend before it returns (one report).
    type: float
    default: 30
  poll:
    description: Seconds between probes inside a call.
    type: float
    default: 1
  stall_timeout:
    description: Seconds without progress before a live instance counts as hung.
    type: float
    default: 900
  timeout:
    description: Seconds since the first round before the whole wait fails.
    type: float
    default: 3600
  state:
    description: The O(state) returned by the previous round; empty on the first round.
    type: dict
    default: {}
  log_lines:
    description: How many log lines to return for a crashed or hung instance.
    type: int
    default: 20
author: sglang-lxc
"""

RETURN = r"""
done:
  description: True once every instance is healthy or any instance crashed or hung or time ran out.
  type: bool
outcome:
  description: C(waiting), C(healthy), C(crashed), C(hung) or C(timeout).
  type: str
report:
  description: Human-readable lines (elapsed time and state per instance).
  type: list
table:
  description: Result table lines (instance, GPU, port, memory, HTTP status, state).
  type: list
verdict:
  description: E.g. "8/8 healthy".
  type: str
instances:
  description: Per-instance observation and classification.
  type: list
state:
  description: Opaque state to pass to the next round.
  type: dict
"""


TERMINAL_BAD = ("crashed", "hung")


# --------------------------------------------------------------------------- pure logic
def unit_crashed(show: dict[str, str], baseline: dict[str, Any] | None) -> str | None:
    """Why the unit's process counts as gone, or None while it runs."""
    active = show.get("ActiveState", "")
    sub = show.get("SubState", "")
    if active == "failed":
        return (
            f"unit failed (result {show.get('Result', '?')}, "
            f"exit status {show.get('ExecMainStatus', '?')})"
        )
    if sub == "auto-restart":
        return (
            f"process exited (exit status {show.get('ExecMainStatus', '?')}); "
            "systemd will restart it"
        )
    if active in ("inactive", "deactivating"):
        return f"unit is {active} (not running)"
    if active == "active" and show.get("MainPID", "0") in ("0", ""):
        return "unit is active without a main process"
    if baseline:
        if int(show.get("NRestarts", "0") or 0) > int(baseline.get("restarts", 0)):
            return "process restarted by systemd since the wait began (it crashed)"
        invocation = show.get("InvocationID", "")
        if baseline.get("invocation") and invocation and invocation != baseline["invocation"]:
            return "unit was started again since the wait began"
    return None


def progress_signature(obs: dict[str, Any]) -> list[Any]:
    """The observations whose change counts as progress."""
    memory = obs.get("memory_mib")
    return [
        obs.get("port_open"),
        obs.get("http_status"),
        obs.get("log_count"),
        obs.get("read_bytes"),
        None if memory is None else int(memory) // 64,
    ]


def classify(
    obs: dict[str, Any],
    previous: dict[str, Any] | None,
    now: float,
    stall_timeout: float,
) -> dict[str, Any]:
    """Classify one observation; returns the instance's new state record.

    ``previous`` is the record this function returned last time (None on the first look).
    """
    previous = previous or {}
    first_seen = previous.get("first_seen", now)
    signature = progress_signature(obs)
    last_progress = previous.get("last_progress", now)
    if previous.get("signature") != signature:
        last_progress = now
    record = {
        "first_seen": first_seen,
        "last_progress": last_progress,
        "signature": signature,
        "baseline": previous.get("baseline") or obs.get("baseline"),
    }
    if obs.get("crash"):
        state, detail = "crashed", obs["crash"]
    elif obs.get("http_status") == 200 and obs.get("model_listed"):
        state, detail = "healthy", "ready"
    elif now - last_progress >= stall_timeout:
        state = "hung"
        detail = (
            f"alive but no progress for {int(now - last_progress)}s (stall timeout "
            f"{int(stall_timeout)}s): {describe_wait(obs)}"
        )
    elif obs.get("http_status") == 200:
        state, detail = "warming", f"/health 200 but {obs.get('models_detail')}"
    elif obs.get("port_open"):
        state, detail = "warming", f"port open, /health {obs.get('http_status') or 'no answer'}"
    else:
        state, detail = "loading", describe_wait(obs)
    record.update({"state": state, "detail": detail})
    return record


def describe_wait(obs: dict[str, Any]) -> str:
    parts = ["port open" if obs.get("port_open") else "port closed"]
    if obs.get("http_status"):
        parts.append(f"/health {obs['http_status']}")
    parts.append(f"{obs.get('log_count', 0)} log lines")
    if obs.get("memory_mib") is not None:
        parts.append(f"GPU memory {format_mib(obs['memory_mib'])}")
    return ", ".join(parts)


def format_mib(mib: float | None) -> str:
    if mib is None:
        return "n/a"
    return f"{mib / 1024:.1f} GiB" if mib >= 1024 else f"{int(mib)} MiB"


def format_elapsed(seconds: float) -> str:
    seconds = int(max(0, seconds))
    return f"{seconds // 3600}:{seconds % 3600 // 60:02d}:{seconds % 60:02d}"


def outcome_of(states: list[str], elapsed: float, timeout: float) -> str:
    if "crashed" in states:
        return "crashed"
    if "hung" in states:
        return "hung"
    if states and all(s == "healthy" for s in states):
        return "healthy"
    if elapsed >= timeout:
        return "timeout"
    return "waiting"


def render_table(rows: list[dict[str, Any]]) -> list[str]:
    header = ["INSTANCE", "GPU", "PORT", "MEMORY", "HTTP", "STATE"]
    body = [
        [
            r["name"],
            ",".join(str(g) for g in r["gpus"]),
            str(r["port"]),
            format_mib(r.get("memory_mib")),
            str(r.get("http_status") or "-"),
            r["state"],
        ]
        for r in rows
    ]
    widths = [max(len(line[i]) for line in [header, *body]) for i in range(len(header))]
    return [
        "  ".join(cell.ljust(widths[i]) for i, cell in enumerate(line)).rstrip()
        for line in [header, *body]
    ]


# --------------------------------------------------------------------------- probes
class Nvml:
    """Device memory through libnvidia-ml, when it loads; every failure means 'unknown'."""

    class _Memory(ctypes.Structure):
        _fields_ = [
            ("total", ctypes.c_ulonglong),
            ("free", ctypes.c_ulonglong),
            ("used", ctypes.c_ulonglong),
        ]

    def __init__(self) -> None:
        self.lib = None
        try:
            lib = ctypes.CDLL("libnvidia-ml.so.1")
            if lib.nvmlInit_v2() == 0:
                self.lib = lib
        except (OSError, AttributeError):
            self.lib = None

    def used_mib(self, gpus: list[int]) -> float | None:
        if self.lib is None:
            return None
        total = 0
        for gpu in gpus:
            handle = ctypes.c_void_p()
            if self.lib.nvmlDeviceGetHandleByIndex_v2(gpu, ctypes.byref(handle)) != 0:
                return None
            memory = self._Memory()
            if self.lib.nvmlDeviceGetMemoryInfo(handle, ctypes.byref(memory)) != 0:
                return None
            total += memory.used
        return total / (1024 * 1024)


SHOW_PROPS = (
    "ActiveState,SubState,MainPID,NRestarts,InvocationID,Result,ExecMainStatus,ControlGroup"
)


def systemctl_show(unit: str) -> dict[str, str]:
    out = subprocess.run(
        ["systemctl", "show", unit, f"--property={SHOW_PROPS}"],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return dict(line.split("=", 1) for line in out.splitlines() if "=" in line)


def journal(unit: str, invocation: str | None, lines: int | None = None) -> list[str]:
    cmd = ["journalctl", "--no-pager", "-o", "cat", "-q"]
    if invocation:
        cmd.append(f"_SYSTEMD_INVOCATION_ID={invocation}")
    else:
        cmd.append(f"--unit={unit}")
    if lines:
        cmd += ["-n", str(lines)]
    out = subprocess.run(cmd, capture_output=True, text=True, check=False).stdout
    return out.splitlines()


def journal_tail(unit: str, lines: int) -> list[str]:
    """Last lines of the unit's journal, systemd's own exit messages included."""
    out = subprocess.run(
        ["journalctl", "--no-pager", "-q", "-o", "cat", f"--unit={unit}", "-n", str(lines)],
        capture_output=True,
        text=True,
        check=False,
    ).stdout
    return out.splitlines()


def read_bytes(control_group: str) -> int | None:
    if not control_group:
        return None
    try:
        with open(f"/sys/fs/cgroup{control_group}/cgroup.procs", encoding="ascii") as fh:
            pids = fh.read().split()
    except OSError:
        return None
    total = 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/io", encoding="ascii") as fh:
                for line in fh:
                    if line.startswith("read_bytes:"):
                        total += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return total


def port_open(host: str, port: int) -> bool:
    try:
        with socket.create_connection((host, port), timeout=1):
            return True
    except OSError:
        return False


def http_get(host: str, port: int, path: str, api_key: str) -> tuple[int | None, bytes]:
    headers = {"Authorization": f"Bearer {api_key}"} if api_key else {}
    conn = http.client.HTTPConnection(host, port, timeout=3)
    try:
        conn.request("GET", path, headers=headers)
        response = conn.getresponse()
        return response.status, response.read(1 << 20)
    except (OSError, http.client.HTTPException):
        return None, b""
    finally:
        conn.close()


def models_listed(body: bytes, served: str) -> tuple[bool, str]:
    try:
        ids = [m.get("id") for m in json.loads(body or b"{}").get("data", [])]
    except (ValueError, AttributeError):
        return False, "/v1/models did not return JSON"
    if served in ids:
        return True, f"serves {served}"
    return False, f"/v1/models lists {ids or 'nothing'}, not {served}"


def observe(
    instance: dict[str, Any], baseline: dict[str, Any] | None, api_key: str, nvml: Nvml
) -> dict[str, Any]:
    show = systemctl_show(instance["unit"])
    obs: dict[str, Any] = {
        "baseline": {
            "restarts": int(show.get("NRestarts", "0") or 0),
            "invocation": show.get("InvocationID", ""),
        },
        "active": f"{show.get('ActiveState', '?')}/{show.get('SubState', '?')}",
    }
    obs["crash"] = unit_crashed(show, baseline or obs["baseline"])
    logs = journal(instance["unit"], show.get("InvocationID") or None)
    obs["log_count"] = len(logs)
    obs["last_log"] = logs[-1][-160:] if logs else ""
    obs["read_bytes"] = read_bytes(show.get("ControlGroup", ""))
    obs["memory_mib"] = nvml.used_mib(instance["gpus"])
    host, port = instance["probe_host"], int(instance["port"])
    obs["port_open"] = port_open(host, port)
    obs["http_status"] = None
    obs["model_listed"] = False
    if obs["port_open"]:
        obs["http_status"], _ = http_get(host, port, "/health", "")
        if obs["http_status"] == 200:
            status, body = http_get(host, port, "/v1/models", api_key)
            if status == 200:
                obs["model_listed"], obs["models_detail"] = models_listed(
                    body, instance["served_model_name"]
                )
            else:
                obs["models_detail"] = f"/v1/models answered {status}"
    return obs


# --------------------------------------------------------------------------- module
def run_round(params: dict[str, Any]) -> dict[str, Any]:
    instances = params["instances"]
    api_key = params["api_key"] or ""
    state = dict(params["state"] or {})
    call_start = time.time()
    started = float(state.get("started", call_start))
    records: dict[str, Any] = dict(state.get("instances", {}))
    nvml = Nvml()
    observations: dict[str, dict[str, Any]] = {}
    while True:
        now = time.time()
        for instance in instances:
            name = instance["name"]
            previous = records.get(name)
            if previous and previous.get("state") in ("healthy", *TERMINAL_BAD):
                continue
            obs = observe(instance, (previous or {}).get("baseline"), api_key, nvml)
            observations[name] = obs
            records[name] = classify(obs, previous, now, float(params["stall_timeout"]))
        states = [records[i["name"]]["state"] for i in instances]
        outcome = outcome_of(states, now - started, float(params["timeout"]))
        if outcome != "waiting" or time.time() - call_start + params["poll"] > params["interval"]:
            break
        time.sleep(params["poll"])

    now = time.time()
    rows, report = [], []
    report.append(f"[{format_elapsed(now - started)}] waiting for {len(instances)} instance(s)")
    for instance in instances:
        name = instance["name"]
        record = records[name]
        obs = observations.get(name, {})
        if "memory_mib" in obs:
            record["memory_mib"] = obs["memory_mib"]
            record["http_status"] = obs["http_status"]
        row = {
            "name": name,
            "unit": instance["unit"],
            "gpus": instance["gpus"],
            "port": instance["port"],
            "state": record["state"],
            "detail": record["detail"],
            "memory_mib": record.get("memory_mib"),
            "http_status": record.get("http_status"),
            "elapsed": int(now - record["first_seen"]),
            "since_progress": int(now - record["last_progress"]),
            "last_log": obs.get("last_log", ""),
        }
        line = (
            f"  {instance['unit']} (GPU {','.join(map(str, instance['gpus']))}, "
            f"port {instance['port']}): {record['state']} for "
            f"{format_elapsed(row['elapsed'])} - {record['detail']}"
        )
        if record["state"] not in ("healthy",) and row["last_log"]:
            line += f"; last log: {row['last_log']}"
        report.append(line)
        if record["state"] in TERMINAL_BAD and "log_tail" not in record:
            record["log_tail"] = journal_tail(instance["unit"], params["log_lines"])
        row["log_tail"] = record.get("log_tail", [])
        rows.append(row)
    states = [r["state"] for r in rows]
    outcome = outcome_of(states, now - started, float(params["timeout"]))
    healthy = states.count("healthy")
    verdict = f"{healthy}/{len(rows)} healthy"
    msg = verdict
    if outcome in TERMINAL_BAD:
        bad = [r for r in rows if r["state"] == outcome]
        parts = []
        for r in bad:
            parts.append(f"{r['unit']} {outcome}: {r['detail']}")
            parts.append(f"last {len(r['log_tail'])} log lines of {r['unit']}:")
            parts.extend(f"    {line}" for line in r["log_tail"])
        msg = "\n".join([f"{verdict}; {len(bad)} {outcome}", *parts])
        report.extend(parts[1:] if len(bad) == 1 else parts)
    elif outcome == "timeout":
        msg = f"{verdict} after {int(now - started)}s (timeout {int(params['timeout'])}s)"
    return {
        "changed": False,
        "done": outcome != "waiting",
        "outcome": outcome,
        "verdict": verdict,
        "msg": msg,
        "report": report,
        "table": render_table(rows),
        "instances": rows,
        "state": {"started": started, "instances": records},
    }


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "instances": {"type": "list", "elements": "dict", "required": True},
            "api_key": {"type": "str", "default": "", "no_log": True},
            "interval": {"type": "float", "default": 30.0},
            "poll": {"type": "float", "default": 1.0},
            "stall_timeout": {"type": "float", "default": 900.0},
            "timeout": {"type": "float", "default": 3600.0},
            "state": {"type": "dict", "default": {}},
            "log_lines": {"type": "int", "default": 20},
        },
        supports_check_mode=True,
    )
    os.environ.setdefault("SYSTEMD_PAGER", "")
    module.exit_json(**run_round(module.params))


if __name__ == "__main__":
    main()
