# Copyright: sglang-lxc contributors
# Apache-2.0
"""One readiness round over SGLang instances run by systemd: the logic of module
sglang_readiness, in plain Python (it imports nothing of Ansible), so that its action can run it
bare on the target (plugins/plugin_utils/remote_python.py) and the module the same way."""

from __future__ import annotations

import itertools
import os
import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_crash_patterns import (
    MATCH_LINES,
    explain,
)
from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_load_progress import (
    instance_weight_files,
    load_progress,
    resident_bytes,
    total_size,
)
from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_unit_probes import (
    Nvml,
    journal_tail,
    observe,
)

TERMINAL_BAD = ("crashed", "hung")

# One update of a tqdm bar as journald keeps it: "<desc>: 35%|..." (tqdm's own format) or
# "<desc>:  35% Completed | 14/40 [...]" (SGLang's bar_format, srt/model_loader/weight_utils.py).
# journald holds the updates (tqdm ends them with \r) until a newline or the stream's end, so a
# load killed mid-way leaves one line per update after systemd's own exit lines.
PROGRESS_BAR = re.compile(r"^(?P<desc>.*?):\s+\d{1,3}%(?:\s*Completed)?\s*\|")
# systemd's line for each process of a unit it signals ("systemctl kill" sends to every process
# of the cgroup; a stop's timeout kills what is left): an SGLang start has a dozen and more
SYSTEMD_SIGNAL = re.compile(
    r"^(?P<unit>\S+): (?:Sending signal (?P<sent>SIG\w+) to process \d+ \(.*\)"
    r"(?P<why> on client request)?|Killing process \d+ \(.*\) with signal (?P<killed>SIG\w+))\.$")


# --------------------------------------------------------------------------- pure logic
def quoted_tail(lines: list[str], count: int) -> list[str]:
    """The last ``count`` lines to quote, each run of one progress bar's updates, and each run
    of systemd's lines for one signal to a unit's processes, cut to its last line after a line
    saying how many were left out: forty shards' updates, or a SIGKILL to seventeen processes,
    would otherwise push SGLang's own lines out of the quote."""

    def kind(indexed: tuple[int, str]) -> tuple:
        line = indexed[1].strip()
        if match := PROGRESS_BAR.match(line):
            return ("bar", match.group("desc"))
        if match := SYSTEMD_SIGNAL.match(line):
            return ("signal", match.group("unit"), match.group("sent"), match.group("why"),
                    match.group("killed"))
        return ("line", indexed[0])  # a line of its own

    kept: list[str] = []
    for key, run in itertools.groupby(enumerate(lines), key=kind):
        run_lines = [line for _index, line in run]
        left = len(run_lines) - 1
        if left and key[0] == "bar":
            kept.append(f"({left} earlier update{'s' if left > 1 else ''} of this bar left out)")
        elif left:
            kept.append(f"({left} earlier line{'s' if left > 1 else ''} like the next, one per "
                        "process, left out)")
        kept.append(run_lines[-1])
    return kept[-count:] if count > 0 else []


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


def classify(
    obs: dict[str, Any],
    previous: dict[str, Any] | None,
    now: float,
    stall_timeout: float,
    rate_window: float = 10.0,
    recovered: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Classify one observation; returns the instance's new state record.

    ``previous`` is the record this function returned last time (None on the first look).
    ``recovered`` is the unit's note (``recovery_note``) when this run started it again after a
    crash before the run: a crash now is then a crash loop.
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
    resolved = obs.get("resolved") or previous.get("resolved")
    if resolved:
        record["resolved"] = resolved  # what SGLang resolved, from the look that found it healthy
    if obs.get("crash"):
        state, detail = "crashed", obs["crash"]
        if recovered is not None:
            detail = crash_loop(detail, recovered["cause"])
    elif obs.get("http_status") == 200 and obs.get("model_listed"):
        state, detail = "healthy", "ready"
        if obs.get("proven_at"):
            at = time.strftime("%H:%M:%S", time.localtime(obs["proven_at"]))
            detail = f"ready (scheduler answers; /health generated a token at {at}, same start)"
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


def recovery_note(value: dict[str, Any] | str) -> dict[str, str]:
    """A unit's entry of module sglang_unit_recover's ``recovered`` (or its text alone) as
    {text, summary, cause}: the report's line, the checklist's, the crash loop's."""
    if isinstance(value, str):
        return {"text": value, "summary": value.split("; last log: ", 1)[0], "cause": ""}
    text = str(value.get("text") or value.get("summary") or "restarted after a crash")
    return {
        "text": text,
        "summary": str(value.get("summary") or text.split("; last log: ", 1)[0]),
        "cause": str(value.get("cause") or ""),
    }


def crash_loop(detail: str, cause: str) -> str:
    """A crash in this wait of a unit this run started again after a crash before it."""
    before = f"it had crashed before this run ({cause})" if cause else (
        "it had crashed before this run")
    return f"crash loop: {before} and crashed again in this wait: {detail}"


def describe_resolved(resolved: dict[str, Any] | None) -> str:
    """What SGLang resolved for an instance (sglang_unit_probes.resolved_settings) as one phrase,
    e.g. ``attention triton, moe auto, quantization w4afp8``; empty when not known. A prefill or
    decode backend is named where it differs from the attention backend; no quantization passed
    means the checkpoint's own config decides (ModelConfig._verify_quantization,
    srt/configs/model_config.py)."""
    if not resolved or not resolved.get("attention_backend"):
        return ""
    attention = str(resolved["attention_backend"])
    split = [
        f"{phase} {resolved[key]}"
        for phase, key in (("prefill", "prefill_attention_backend"),
                           ("decode", "decode_attention_backend"))
        if resolved.get(key) and resolved[key] != attention
    ]
    if split:
        attention += f" ({', '.join(split)})"
    parts = [f"attention {attention}"]
    if resolved.get("moe_runner_backend"):
        parts.append(f"moe {resolved['moe_runner_backend']}")
    quantization = resolved.get("quantization")
    parts.append(f"quantization {quantization}" if quantization
                 else "quantization from the checkpoint")
    return ", ".join(parts)


def resolved_lines(rows: list[dict[str, Any]]) -> list[str]:
    """The checklist's phrases of what SGLang resolved, instances that resolved alike together:
    ``gpu0, gpu1: attention flashinfer, moe auto, quantization fp8``."""
    groups: dict[str, list[str]] = {}
    for row in rows:
        text = describe_resolved(row.get("resolved"))
        if text:
            groups.setdefault(text, []).append(row["name"])
    return [f"{', '.join(names)}: {text}" for text, names in groups.items()]


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


def where(instance: dict[str, Any]) -> str:
    """``GPU 0,1`` or ``CPU`` (an instance with no GPUs runs on SGLang's CPU engine)."""
    gpus = ",".join(map(str, instance.get("gpus") or []))
    return f"GPU {gpus}" if gpus else "CPU"


def render_table(rows: list[dict[str, Any]]) -> list[str]:
    header = ["INSTANCE", "GPU", "PORT", "MEMORY", "HTTP", "STATE", "LOAD"]
    body = [
        [
            r["name"],
            ",".join(str(g) for g in r["gpus"]) or "cpu",
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
    notes = {unit: recovery_note(value)
             for unit, value in (params.get("recovered") or {}).items()}
    while True:
        now = time.time()
        looking = [i for i in instances
                   if (records.get(i["name"]) or {}).get("state") not in ("healthy", *TERMINAL_BAD)]
        # every instance at once: SGLang's /health generates a token and answers after a second
        # at the earliest, so one after the other, eight instances took eight seconds a round
        with ThreadPoolExecutor(max_workers=max(1, len(looking))) as pool:
            futures = {i["name"]: pool.submit(observe, i, (records.get(i["name"]) or {}).get(
                "baseline"), api_key, nvml, proven_dir=params.get("proven_dir") or "")
                for i in looking}
            seen = {name: future.result() for name, future in futures.items()}
        for instance in looking:
            name = instance["name"]
            previous = records.get(name)
            obs = seen[name]
            if obs.get("answered"):  # healthy at this look: no load progress to weigh
                obs["total_bytes"] = (previous or {}).get("progress", {}).get("total_bytes", 0)
                observations[name] = obs
                records[name] = classify(
                    obs, previous, now, float(params["stall_timeout"]), window,
                    notes.get(instance["unit"]),
                )
                continue
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
                obs, previous, now, float(params["stall_timeout"]), window,
                notes.get(instance["unit"]),
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
            f"  {instance['unit']} ({where(instance)}, "
            f"port {instance['port']}): {label or record['state']} for "
            f"{format_elapsed(row['elapsed'])} - {record['detail']}"
        )
        if record["state"] not in ("healthy",) and row["last_log"]:
            line += f"; last log: {row['last_log']}"
        if record["state"] == "healthy" and record.get("resolved"):
            row["resolved"] = record["resolved"]
            line += f"; {describe_resolved(record['resolved'])}"
        note = notes.get(instance["unit"])
        if note:
            row["recovered"] = note["text"]
            line += f"; {note['text']}"
        report.append(line)
        if record["state"] in TERMINAL_BAD and "log_tail" not in record:
            # the known failures are matched over more lines than the message quotes
            tail = journal_tail(instance["unit"], max(int(params["log_lines"]), MATCH_LINES))
            record["log_tail"] = quoted_tail(tail, int(params["log_lines"]))
            record["known_failures"] = explain(tail, instance)
        row["log_tail"] = record.get("log_tail", [])
        row["known_failures"] = record.get("known_failures", [])
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
    restarted = [
        f"{r['name']} {notes[r['unit']]['summary']}"
        + (", then crashed again in this wait" if r["state"] == "crashed" else "")
        for r in rows
        if r["unit"] in notes
    ]
    summary = "; ".join([verdict, *waiting, *restarted])
    msg = verdict
    if outcome in TERMINAL_BAD:
        bad = [r for r in rows if r["state"] == outcome]
        parts = []
        for r in bad:
            parts.append(f"{r['unit']} {outcome}: {r['detail']}")
            parts.append(f"last {len(r['log_tail'])} log lines of {r['unit']}:")
            parts.extend(f"    {line}" for line in r["log_tail"])
            parts.extend(r["known_failures"])  # after SGLang's own lines
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
        "checklist": "; ".join([verdict, *resolved_lines(rows), *restarted]),
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


# The module's arguments; the action plugin sglang_readiness applies them on the controller.
ARGUMENT_SPEC = {
    "instances": {"type": "list", "elements": "dict", "required": True},
    "api_key": {"type": "str", "default": "", "no_log": True},
    "interval": {"type": "float", "default": 30.0},
    "poll": {"type": "float", "default": 1.0},
    "stall_timeout": {"type": "float", "default": 900.0},
    "timeout": {"type": "float", "default": 3600.0},
    "state": {"type": "dict", "default": {}},
    "log_lines": {"type": "int", "default": 20},
    "rate_window": {"type": "float", "default": 10.0},
    "proven_dir": {"type": "str", "default": "/run/sglang-lxc/readiness"},
    "recovered": {"type": "dict", "default": {}},
}


def answer(**params: Any) -> dict[str, Any]:
    """The module's whole result, for validated arguments (the module and the bare action)."""
    os.environ.setdefault("SYSTEMD_PAGER", "")
    return run_round(params)
