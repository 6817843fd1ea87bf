# Copyright: sglang-lxc contributors
# Apache-2.0
"""Start again the SGLang units that crashed before this run: the logic of module
sglang_unit_recover, in plain Python (it imports nothing of Ansible; unit-tested in
tests/unit/serve/test_unit_recover.py with recorded ``systemctl show`` outputs).

A unit that crashed waits in ``activating/auto-restart`` for its RestartSec (systemd's ``start``
waits for that hold-off too, and Ansible's systemd_service counts the unit as running), or is
``failed`` (its start limit hit, or a failure Restart=on-failure does not restart). Such a unit
is reset (``systemctl reset-failed``: its start-limit counter and result) and started again
(``restart`` for one in auto-restart, ``start`` for a failed one), and the readiness wait then
waits for it like for any start. What it was is kept for the run's report: when it crashed (from
``ExecMainExitTimestampMonotonic``, on the clock systemd keeps it on), how (exit status or
signal), its result, and the last line the failed invocation logged. Units that are active,
starting or stopped are left alone: a stopped unit is the ``Enable and start`` task's.
"""

from __future__ import annotations

import signal
import subprocess
import time
from collections.abc import Callable
from typing import Any

from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_unit_probes import (
    journal_command,
)

SHOW_PROPS = (
    "ActiveState,SubState,Result,ExecMainStatus,ExecMainCode,ExecMainExitTimestampMonotonic,"
    "NRestarts,InvocationID"
)
# ExecMainCode: the si_code of the main process's exit (CLD_EXITED, CLD_KILLED, CLD_DUMPED)
EXITED, KILLED, DUMPED = "1", "2", "3"
LAST_LOG_CHARS = 200

# argv -> (return code, stdout, stderr)
Runner = Callable[[list[str]], "tuple[int, str, str]"]


def run(argv: list[str]) -> tuple[int, str, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=120, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return 127, "", str(exc)
    return proc.returncode, proc.stdout, proc.stderr


def parse_show(output: str) -> dict[str, str]:
    return dict(line.split("=", 1) for line in output.splitlines() if "=" in line)


def action_for(show: dict[str, str]) -> str | None:
    """``restart`` for a unit waiting to auto-restart, ``start`` for a failed one, else None."""
    if show.get("SubState", "").startswith("auto-restart"):  # systemd 254: auto-restart-queued
        return "restart"
    if show.get("ActiveState") == "failed":
        return "start"
    return None


def signal_name(number: str) -> str:
    try:
        return signal.Signals(int(number)).name.removeprefix("SIG")
    except ValueError:
        return ""


def exit_of(show: dict[str, str]) -> tuple[str, str]:
    """(status, cause) of the main process's last exit: ``exit status 9`` for both, or
    ``signal 9 (KILL)`` and ``killed by signal 9``."""
    status = show.get("ExecMainStatus") or "?"
    code = show.get("ExecMainCode", "")
    if code in (KILLED, DUMPED):
        name = signal_name(status)
        dumped = ", core dumped" if code == DUMPED else ""
        return (f"signal {status} ({name})" if name else f"signal {status}",
                f"killed by signal {status}{dumped}")
    return f"exit status {status}", f"exit status {status}"


def crashed_seconds_ago(show: dict[str, str], now_monotonic: float) -> int | None:
    """Seconds since the main process exited (None when systemd has no exit time)."""
    try:
        exited = int(show.get("ExecMainExitTimestampMonotonic") or 0)
    except ValueError:
        return None
    if exited <= 0:
        return None
    return max(0, int(now_monotonic - exited / 1e6))


def format_age(seconds: int) -> str:
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    if seconds < 2 * 86400:
        return f"{seconds // 3600} h"
    return f"{seconds // 86400} d"


def last_log(unit: str, invocation: str, runner: Runner) -> str:
    """The last line the (failed) invocation logged; a progress bar's last redraw only."""
    rc, out, _err = runner(journal_command(unit, invocation or None, 1))
    lines = out.splitlines() if rc == 0 else []
    return lines[-1].split("\r")[-1].strip()[:LAST_LOG_CHARS] if lines else ""


def describe(show: dict[str, str], seconds: int | None, log: str) -> dict[str, Any]:
    """What the unit had been, as fields and as the report's line."""
    status, cause = exit_of(show)
    when = f"crashed {format_age(seconds)} before this run" if seconds is not None else (
        "crashed before this run")
    summary = f"restarted: it had {when} ({cause})"
    if show.get("Result") == "start-limit-hit":
        summary += " and hit its start limit"
    return {
        "state": f"{show.get('ActiveState', '?')}/{show.get('SubState', '?')}",
        "result": show.get("Result", ""),
        "restarts": int(show.get("NRestarts") or 0),
        "crashed_s": seconds,
        "status": status,
        "cause": cause,
        "last_log": log,
        "summary": summary,
        "text": f"{summary}; last log: {log}" if log else summary,
    }


def recover(
    units: list[str],
    check_mode: bool = False,
    runner: Runner = run,
    monotonic: Callable[[], float] = time.monotonic,
) -> dict[str, Any]:
    """Reset and start again every unit of ``units`` found in auto-restart or failed; in check
    mode only say so. Returns the module's result."""
    recovered: dict[str, dict[str, Any]] = {}
    commands: list[list[str]] = []
    for unit in units:
        rc, out, err = runner(["systemctl", "show", f"--property={SHOW_PROPS}", "--", unit])
        if rc != 0:
            return {"failed": True, "changed": bool(recovered), "recovered": recovered,
                    "commands": commands,
                    "msg": f"systemctl show {unit} failed (rc {rc}): {err.strip()}"}
        show = parse_show(out)
        action = action_for(show)
        if action is None:
            continue
        seconds = crashed_seconds_ago(show, monotonic())
        entry = describe(show, seconds, last_log(unit, show.get("InvocationID", ""), runner))
        entry["action"] = action
        recovered[unit] = entry
        todo = [["systemctl", "reset-failed", unit], ["systemctl", action, unit]]
        commands += todo
        if check_mode:
            continue
        runner(todo[0])  # only clears a counter and a result; the start below reports
        rc, _out, err = runner(todo[1])
        if rc != 0:
            return {"failed": True, "changed": True, "recovered": recovered,
                    "commands": commands,
                    "msg": f"systemctl {action} {unit} failed (rc {rc}): "
                           f"{err.strip().rstrip('.')}; "
                           f"{entry['text'].removeprefix('restarted: ')}"}
    lines = [f"{unit}: {entry['text']}" for unit, entry in recovered.items()]
    return {
        "changed": bool(recovered),
        "recovered": recovered,
        "commands": commands,
        "msg": "; ".join(lines) if lines else "no unit had crashed before this run",
    }


# The module's arguments.
ARGUMENT_SPEC = {
    "units": {"type": "list", "elements": "str", "required": True},
}


def answer(units: list[str], check_mode: bool = False) -> dict[str, Any]:
    """The module's whole result, for validated arguments."""
    return recover(units, check_mode)
