"""What an SGLang instance shows from outside: its systemd unit, journal, cgroup's reads, port,
HTTP endpoints and GPU memory (module sglang_readiness; unit-tested in
tests/unit/serve/test_serve_readiness.py)."""

from __future__ import annotations

import contextlib
import ctypes
import http.client
import json
import os
import socket
import subprocess
import time
from typing import Any

from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_load_progress import (
    shard_progress,
)


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


def journal_command(unit: str, invocation: str | None, lines: int | None = None) -> list[str]:
    """journalctl for one invocation of the unit (the lines its processes logged), or for the
    whole unit when the invocation is not known; the last ``lines`` only when given."""
    cmd = ["journalctl", "--no-pager", "-o", "cat", "-q"]
    if invocation:
        cmd.append(f"_SYSTEMD_INVOCATION_ID={invocation}")
    else:
        cmd.append(f"--unit={unit}")
    if lines:
        cmd += ["-n", str(lines)]
    return cmd


def journal(unit: str, invocation: str | None, lines: int | None = None) -> list[str]:
    cmd = journal_command(unit, invocation, lines)
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
    if not pids:  # no cgroup, or no process left in it (killed): nothing to count, not 0 bytes
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


# What SGLang resolved for an instance (ServerArgs fields, srt/server_args.py of SGLang 0.5.12),
# as GET /server_info returns them: dataclasses.asdict(server_args) of the tokenizer manager, the
# scheduler's init info and "internal_states", one dict per DP rank holding the scheduler's own
# vars(get_global_server_args()) (srt/entrypoints/http_server.py:630-644,
# srt/managers/scheduler.py:3469-3492). ServerArgs settles them at its start (__post_init__:
# _handle_attention_backend_compatibility picks the attention backend when none was passed).
RESOLVED_FIELDS = (
    "attention_backend",
    "prefill_attention_backend",
    "decode_attention_backend",
    "moe_runner_backend",
    "quantization",
)


def resolved_settings(body: bytes | str) -> dict[str, Any] | None:
    """RESOLVED_FIELDS from a /server_info answer, the scheduler's own values first (its first
    internal state), else the top level's; None when the body is not such an answer."""
    try:
        info = json.loads(body or b"{}")
    except ValueError:
        return None
    if not isinstance(info, dict):
        return None
    states = info.get("internal_states")
    scheduler = states[0] if isinstance(states, list) and states and isinstance(
        states[0], dict) else {}
    found = {}
    for field in RESOLVED_FIELDS:
        if field in scheduler:
            found[field] = scheduler[field]
        elif field in info:
            found[field] = info[field]
    return found if "attention_backend" in found else None


def proven_at(proven_dir: str, unit: str, invocation: str) -> float | None:
    """When /health last generated a token for this invocation (this run) of the unit; None
    when it never did, or the unit has restarted since (a new InvocationID)."""
    if not (proven_dir and invocation):
        return None
    try:
        with open(os.path.join(proven_dir, f"{unit}.json"), encoding="utf-8") as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    if not isinstance(record, dict) or record.get("invocation") != invocation:
        return None
    try:
        return float(record["at"])
    except (KeyError, TypeError, ValueError):
        return None


def prove(proven_dir: str, unit: str, invocation: str, at: float) -> None:
    """Remember that this invocation of the unit generated a token (/health 200); written aside
    and renamed, so a reader sees the old record or the new one. /run: gone at reboot."""
    if not (proven_dir and invocation):
        return
    try:
        os.makedirs(proven_dir, mode=0o700, exist_ok=True)
        path = os.path.join(proven_dir, f"{unit}.json")
        with open(path + ".tmp", "w", encoding="utf-8") as handle:
            json.dump({"invocation": invocation, "at": at}, handle)
        os.replace(path + ".tmp", path)
    except OSError:
        pass  # a record not kept costs the next look a /health wait, nothing else


def forget(proven_dir: str, unit: str) -> None:
    with contextlib.suppress(OSError):
        os.unlink(os.path.join(proven_dir, f"{unit}.json"))


def observe(
    instance: dict[str, Any], baseline: dict[str, Any] | None, api_key: str, nvml: Nvml,
    proven_dir: str = "",
) -> dict[str, Any]:
    """What one look at an instance finds. An active unit that answers healthy and lists its
    model is taken at its word: its journal, I/O counters and weights are not read (the
    no-op rerun's case; reading a long journal and the page cache of a large model cost
    seconds). Anything else is looked at in full, for the progress, stall and crash logic.

    Healthy is SGLang's /health (200 once a token was generated; it answers after a second at
    the earliest). Once an invocation of the unit has passed it (recorded under proven_dir), a
    later look at the same invocation asks its scheduler instead: /server_info is answered by
    the scheduler's own loop (a hung forward pass blocks it) in milliseconds. Any other answer
    drops the record, and the look after that asks /health again.

    A look that finds the instance healthy also keeps what SGLang resolved for it (``resolved``:
    attention backends, MoE runner backend, quantization) from that /server_info answer; after a
    /health look it asks /server_info once for it (the scheduler's loop, milliseconds)."""
    show = systemctl_show(instance["unit"])
    obs: dict[str, Any] = {
        "baseline": {
            "restarts": int(show.get("NRestarts", "0") or 0),
            "invocation": show.get("InvocationID", ""),
        },
        "active": f"{show.get('ActiveState', '?')}/{show.get('SubState', '?')}",
    }
    obs["crash"] = unit_crashed(show, baseline or obs["baseline"])
    obs["memory_mib"] = nvml.used_mib(instance["gpus"])
    host, port = instance["probe_host"], int(instance["port"])
    obs["port_open"] = port_open(host, port)
    obs["http_status"] = None
    obs["model_listed"] = False
    invocation = show.get("InvocationID", "")
    proven = None
    if show.get("ActiveState") == "active" and not obs["crash"]:
        proven = proven_at(proven_dir, instance["unit"], invocation)
    server_info = None
    if obs["port_open"]:
        if proven is not None:
            obs["http_status"], body = http_get(host, port, "/server_info", api_key)
            if obs["http_status"] == 200:
                obs["proven_at"] = proven
                server_info = body
            else:
                forget(proven_dir, instance["unit"])
        else:
            obs["http_status"], _body = http_get(host, port, "/health", "")
        if obs["http_status"] == 200:
            status, body = http_get(host, port, "/v1/models", api_key)
            if status == 200:
                obs["model_listed"], obs["models_detail"] = models_listed(
                    body, instance["served_model_name"]
                )
            else:
                obs["models_detail"] = f"/v1/models answered {status}"
    obs["answered"] = (not obs["crash"] and show.get("ActiveState") == "active"
                       and obs["http_status"] == 200 and obs["model_listed"])
    if obs["answered"]:
        if proven is None:
            prove(proven_dir, instance["unit"], invocation, time.time())
            status, body = http_get(host, port, "/server_info", api_key)
            server_info = body if status == 200 else None
        resolved = resolved_settings(server_info) if server_info is not None else None
        if resolved:
            obs["resolved"] = resolved
        return obs
    logs = journal(instance["unit"], show.get("InvocationID") or None)
    obs["log_count"] = len(logs)
    last = logs[-1].split("\r")[-1].strip() if logs else ""
    obs["last_log"] = last[-160:]
    obs["shards"] = shard_progress(logs[-50:])
    obs["read_bytes"], obs["read_chars"] = io_counters(show.get("ControlGroup", ""))
    obs["read_at"] = time.time()  # the rate's clock: the look's journal read can take seconds
    return obs
