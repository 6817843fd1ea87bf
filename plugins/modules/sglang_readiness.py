#!/usr/bin/python
"""Ansible module: one readiness round over SGLang instances run by systemd."""

from __future__ import annotations

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
    current invocation, SGLang's shard progress in them, disk bytes read (and bytes read through
    read calls) by every process of the unit's cgroup, or GPU memory used (NVML, when the driver
    library loads). A slow load that still moves is never hung.
  - While an instance loads it reports load progress, e.g.
    C(loading 43% (235/547 GB, 1.9 GB/s, ETA 2m40s)). The total is the size of the model's
    weight files (those the safetensors index names, else the C(*.safetensors) files of the
    folder, else C(*.bin)/C(*.pt)) plus the draft model's; done is the bytes every process of
    the unit's cgroup read from disk (TP workers are children of the server), plus the bytes
    of the weights that were in the page cache when the wait began (C(fincore)); the rate is taken
    over the last O(rate_window) seconds. SGLang's own shard lines (C(Loading safetensors
    checkpoint shards), C(Multi-thread loading shards)) add C(shards i/n) where the journal has
    them. When the bytes read stay flat and the weights are in the page cache (C(fincore)), it
    says C(cached) instead of a false 0%.
options:
  instances:
    description: Resolved instances (name, unit, port, probe_host, gpus, served_model_name,
      model_path, draft_model_path).
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
  rate_window:
    description: Seconds of samples the read rate (and so the ETA) is taken over.
    type: float
    default: 10
author:
  - sglang-lxc contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: One round of readiness for every instance (loading, healthy, crashed, hung)
  sglang_lxc.serving.sglang_readiness:
    instances:
      - {name: gpu0, unit: sglang@gpu0.service, port: 30000, model_path: /srv/models/kimi-k2.5}
    interval: 30
    stall_timeout: 600
    timeout: 3600
    state: "{{ previous_round.state | default({}) }}"
  register: previous_round
"""

RETURN = r"""
done:
  description: True once every instance is healthy or any instance crashed or hung or time ran out.
  type: bool
  returned: always
outcome:
  description: C(waiting), C(healthy), C(crashed), C(hung) or C(timeout).
  type: str
  returned: always
report:
  description: Human-readable lines (elapsed time and state per instance).
  type: list
  returned: always
table:
  description: Result table lines (instance, GPU, port, memory, HTTP status, state).
  type: list
  returned: always
verdict:
  description: E.g. "8/8 healthy".
  type: str
  returned: always
summary:
  description: >-
    One line for a checklist, e.g. "7/8 healthy; gpu3 loading 43% (235/547 GB, 1.9 GB/s, ETA
    2m40s)".
  type: str
  returned: always
progress:
  description: >-
    Per instance, as fields - name, state, elapsed_s and, while loading, percent, done_bytes,
    total_bytes, rate_bps, eta_s, shards_done, shards_total, cached, text.
  type: list
  returned: always
instances:
  description: >-
    Per-instance observation and classification; C(progress) holds the load progress as fields
    (percent, done_bytes, total_bytes, rate_bps, eta_s, shards_done, shards_total, cached, text).
  type: list
  returned: always
state:
  description: Opaque state to pass to the next round.
  type: dict
  returned: always
"""

import ctypes
import glob
import http.client
import json
import os
import re
import socket
import subprocess
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule

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
        obs.get("read_chars"),
        obs.get("shards"),
        None if memory is None else int(memory) // 64,
    ]


# SGLang 0.5.12's loader (sglang/srt/model_loader/weight_utils.py) prints tqdm bars such as
# "Loading safetensors checkpoint shards:  43% Completed | 35/82 [...]" or "Multi-thread loading
# shards: ..."; tqdm redraws with carriage returns, so one journal line may hold many updates.
SHARD_LINE = re.compile(r"(?:checkpoint shards|loading shards)[^|\r\n]*\|\s*(\d+)/(\d+)")


def shard_progress(lines: list[str]) -> list[int] | None:
    """[done, total] of the last shard-progress update in ``lines`` (None when there is none)."""
    for line in reversed(lines):
        found = SHARD_LINE.findall(line)
        if found:
            done, total = found[-1]
            return [int(done), int(total)]
    return None


WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")


def weight_files(model_path: str) -> list[str]:
    """The files SGLang loads weights from: those the safetensors index names (SGLang drops the
    others), else every ``*.safetensors`` of the folder, else ``*.bin`` / ``*.pt``."""
    if not model_path:
        return []
    index = os.path.join(model_path, "model.safetensors.index.json")
    try:
        with open(index, encoding="utf-8") as handle:
            names = sorted(set(json.load(handle).get("weight_map", {}).values()))
        return [os.path.join(model_path, n) for n in names]
    except (OSError, ValueError, AttributeError):
        pass
    for pattern in WEIGHT_PATTERNS:
        found = sorted(glob.glob(os.path.join(glob.escape(model_path), pattern)))
        if found:
            return found
    return []


def instance_weight_files(instance: dict[str, Any]) -> list[str]:
    """The model's weight files plus the EAGLE-3 draft model's."""
    files = weight_files(str(instance.get("model_path") or ""))
    argv = list(instance.get("argv") or [])
    if "--speculative-draft-model-path" in argv:
        index = argv.index("--speculative-draft-model-path") + 1
        if index < len(argv):
            files += weight_files(argv[index])
    return files


def total_size(files: list[str]) -> int:
    total = 0
    for path in files:
        try:
            total += os.stat(path).st_size
        except OSError:
            continue
    return total


def resident_bytes(files: list[str]) -> int | None:
    """Bytes of ``files`` in the page cache (util-linux fincore), None when it cannot tell."""
    if not files:
        return None
    try:
        out = subprocess.run(
            ["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES", *files],
            capture_output=True,
            text=True,
            check=False,
            timeout=20,
        ).stdout
        return sum(int(v) for v in out.split() if v.isdigit())
    except (OSError, subprocess.SubprocessError):
        return None


GB = 1e9


def format_bytes(count: float, like: float | None = None) -> str:
    """547 GB, 1.9 GB, 38 MB (decimal units, as model sizes are given); in the unit and
    precision ``like`` would get, when given (235/547 GB, 0.9/2.1 GB)."""
    scale = count if like is None else like
    if scale >= 100 * GB:
        return f"{count / GB:.0f} GB"
    if scale >= GB:
        return f"{count / GB:.1f} GB"
    return f"{count / 1e6:.0f} MB"


def format_eta(seconds: float) -> str:
    seconds = round(max(0, seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def load_progress(
    obs: dict[str, Any], previous: dict[str, Any], now: float, window: float
) -> tuple[dict[str, Any], list[list[float]]]:
    """Load progress of one instance and the read samples to keep (``[[time, bytes], ...]``).

    ``done`` is what the unit's processes read from disk plus what was in the page cache when the
    wait began (``obs["cached_at_start"]``, read once), capped at the weights' total; the rate
    is taken over the samples of the last ``window`` seconds. Flat reads while the weights sit
    in the page cache (``obs["resident_bytes"]``) say "cached" rather than a false 0%.
    """
    total = int(obs.get("total_bytes") or 0)
    read = obs.get("read_bytes")
    samples = [s for s in previous.get("samples", []) if now - s[0] <= window]
    if read is not None:
        samples.append([now, int(read)])
    shards = obs.get("shards") or previous.get("progress", {}).get("shards")
    # the weights already in the page cache when the wait began: they load without a disk read
    cached_bytes = previous.get("progress", {}).get("cached_bytes")
    if cached_bytes is None:
        cached_bytes = min(int(obs.get("cached_at_start") or 0), total)
    progress: dict[str, Any] = {
        "total_bytes": total,
        "cached_bytes": cached_bytes,
        "done_bytes": None,
        "percent": None,
        "rate_bps": None,
        "eta_s": None,
        "shards_done": shards[0] if shards else None,
        "shards_total": shards[1] if shards else None,
        "shards": shards,
        "cached": False,
    }
    if read is not None and total:
        done = min(int(read) + cached_bytes, total)
        progress["done_bytes"] = done
        progress["percent"] = int(done * 100 // total)
        # from the last sample before reads began to move (a flat start, e.g. the imports
        # before the weights, would understate the rate for a whole window)
        moving = samples
        while len(moving) > 2 and moving[1][1] == moving[0][1]:
            moving = moving[1:]
        if len(moving) >= 2 and moving[-1][0] - moving[0][0] >= 1:
            span = moving[-1][0] - moving[0][0]
            rate = max(0.0, (moving[-1][1] - moving[0][1]) / span)
            progress["rate_bps"] = round(rate)
            # no ETA before 2% of the weights were read: until then the reads are the
            # interpreter's libraries (SGLang's imports), and an ETA of hours would mislead
            if rate > 0 and done < total and int(read) >= 0.02 * (total - cached_bytes):
                progress["eta_s"] = round((total - done) / rate)
            resident = obs.get("resident_bytes")
            flat = rate * span < 0.01 * total
            if flat and resident is not None and resident >= 0.9 * (total - done):
                progress["cached"] = True
    if shards and (progress["percent"] is None or progress["cached"]):
        progress["percent"] = int(shards[0] * 100 // max(1, shards[1]))
    progress["text"] = progress_text(progress)
    return progress, samples


def progress_text(progress: dict[str, Any]) -> str:
    """``43% (235/547 GB, 1.9 GB/s, ETA 2m40s)``, ``cached, shards 82/82`` or ``''``."""
    shards = progress.get("shards")
    shard_text = f"shards {shards[0]}/{shards[1]}" if shards else ""
    if progress.get("cached"):
        return ", ".join(p for p in ("cached", shard_text or "weights in page cache") if p)
    if progress.get("done_bytes") is None:  # no weight files here to weigh: SGLang's shards
        return f"{progress['percent']}% ({shard_text})" if shard_text else ""
    total = progress["total_bytes"]
    parts = [f"{format_bytes(progress['done_bytes'], total).split()[0]}/{format_bytes(total)}"]
    if progress.get("rate_bps") is not None:
        parts.append(f"{format_bytes(progress['rate_bps'])}/s")
    if progress.get("eta_s") is not None:
        parts.append(f"ETA {format_eta(progress['eta_s'])}")
    if progress.get("cached_bytes"):
        parts.append(f"{format_bytes(progress['cached_bytes'], total)} cached")
    if shard_text:
        parts.append(shard_text)
    return f"{progress['percent']}% ({', '.join(parts)})"


def classify(
    obs: dict[str, Any],
    previous: dict[str, Any] | None,
    now: float,
    stall_timeout: float,
    rate_window: float = 10.0,
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
    progress, samples = load_progress(obs, previous, now, rate_window)
    if obs.get("crash") and previous.get("progress"):
        progress = previous["progress"]  # where the load was (its processes are gone now)
    record = {
        "first_seen": first_seen,
        "last_progress": last_progress,
        "signature": signature,
        "baseline": previous.get("baseline") or obs.get("baseline"),
        "progress": progress,
        "samples": samples,
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
        if progress["text"]:
            state_text = f"loading {progress['text']}"
            record["label"] = state_text
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
    header = ["INSTANCE", "GPU", "PORT", "MEMORY", "HTTP", "STATE", "LOAD"]
    body = [
        [
            r["name"],
            ",".join(str(g) for g in r["gpus"]),
            str(r["port"]),
            format_mib(r.get("memory_mib")),
            str(r.get("http_status") or "-"),
            r["state"],
            (r.get("progress") or {}).get("text") or "-",
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


# The unit's cgroup: unified hierarchy (cgroup v2), or systemd's own tree on a hybrid/legacy
# host (cgroup v1, as in LXC containers on such a host).
CGROUP_ROOTS = ("/sys/fs/cgroup", "/sys/fs/cgroup/unified", "/sys/fs/cgroup/systemd")


def cgroup_pids(control_group: str) -> list[str] | None:
    if not control_group:
        return None
    for root in CGROUP_ROOTS:
        try:
            with open(f"{root}{control_group}/cgroup.procs", encoding="ascii") as fh:
                return fh.read().split()
        except OSError:
            continue
    return None


def io_counters(control_group: str) -> tuple[int | None, int | None]:
    """(read_bytes, rchar) summed over every process of the unit's cgroup (TP workers too):
    bytes fetched from storage, and bytes read through read calls (page cache hits too)."""
    pids = cgroup_pids(control_group)
    if pids is None:
        return None, None
    read, chars = 0, 0
    for pid in pids:
        try:
            with open(f"/proc/{pid}/io", encoding="ascii") as fh:
                for line in fh:
                    if line.startswith("read_bytes:"):
                        read += int(line.split()[1])
                    elif line.startswith("rchar:"):
                        chars += int(line.split()[1])
        except (OSError, ValueError):
            continue
    return read, chars


def read_bytes(control_group: str) -> int | None:
    return io_counters(control_group)[0]


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
    last = logs[-1].split("\r")[-1].strip() if logs else ""
    obs["last_log"] = last[-160:]
    obs["shards"] = shard_progress(logs[-50:])
    obs["read_bytes"], obs["read_chars"] = io_counters(show.get("ControlGroup", ""))
    obs["memory_mib"] = nvml.used_mib(instance["gpus"])
    host, port = instance["probe_host"], int(instance["port"])
    obs["port_open"] = port_open(host, port)
    obs["http_status"] = None
    obs["model_listed"] = False
    if obs["port_open"]:
        obs["http_status"], _body = http_get(host, port, "/health", "")
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
    window = float(params.get("rate_window") or 10.0)
    weights: dict[str, list[str]] = {}
    resident: dict[str, int | None] = {}
    while True:
        now = time.time()
        for instance in instances:
            name = instance["name"]
            previous = records.get(name)
            if previous and previous.get("state") in ("healthy", *TERMINAL_BAD):
                continue
            obs = observe(instance, (previous or {}).get("baseline"), api_key, nvml)
            if name not in weights:
                weights[name] = instance_weight_files(instance)
            obs["total_bytes"] = (previous or {}).get("progress", {}).get(
                "total_bytes"
            ) or total_size(weights[name])
            progress = (previous or {}).get("progress") or {}
            if "cached_bytes" not in progress:  # the first look: what is cached before the load
                before_load = (obs.get("read_bytes") or 0) < 0.01 * obs["total_bytes"]
                obs["cached_at_start"] = resident_bytes(weights[name]) if before_load else 0
            if progress.get("rate_bps") == 0 and name not in resident:
                resident[name] = resident_bytes(weights[name])  # once a call, when reads stall
            obs["resident_bytes"] = resident.get(name)
            observations[name] = obs
            records[name] = classify(
                obs, previous, now, float(params["stall_timeout"]), window
            )
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
            # while loading, and where a load stopped (crashed, hung)
            "progress": {k: v for k, v in (record.get("progress") or {}).items() if k != "shards"}
            if record["state"] in ("loading", *TERMINAL_BAD)
            else {},
        }
        label = record.get("label") if record["state"] == "loading" else None
        line = (
            f"  {instance['unit']} (GPU {','.join(map(str, instance['gpus']))}, "
            f"port {instance['port']}): {label or record['state']} for "
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
    waiting = [
        f"{r['name']} loading {r['progress']['text']}"
        if r["progress"].get("text")
        else f"{r['name']} {r['state']}"
        for r in rows
        if r["state"] != "healthy"
    ]
    summary = "; ".join([verdict, *waiting])
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
        "summary": summary,
        "progress": [
            {"name": r["name"], "state": r["state"], "elapsed_s": r["elapsed"], **r["progress"]}
            for r in rows
        ],
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
            "rate_window": {"type": "float", "default": 10.0},
        },
        supports_check_mode=True,
    )
    os.environ.setdefault("SYSTEMD_PAGER", "")
    module.exit_json(**run_round(module.params))


if __name__ == "__main__":
    main()
