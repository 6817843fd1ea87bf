"""Processes: is a recorded pid still the same process, and ending a run's whole tree.

Linux only (``/proc``), like the lab and the nodes.
"""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import time
from collections.abc import Iterable

PR_SET_CHILD_SUBREAPER = 36


def _stat(pid: int) -> list[str] | None:
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    # "pid (comm) state ppid pgrp session ... starttime(22)": comm may hold spaces
    return [str(pid), "comm", *text[text.rindex(")") + 2:].split()]


def start_time(pid: int) -> int | None:
    """The process's start time in clock ticks since boot (tells a reused pid apart)."""
    fields = _stat(pid)
    return int(fields[21]) if fields and len(fields) > 21 else None


def alive(pid: int | None, started: int | None = None) -> bool:
    """``pid`` runs and, when ``started`` is given, is the process that started then."""
    if not pid:
        return False
    fields = _stat(pid)
    if fields is None or fields[2] in ("Z", "X"):
        return False
    return started is None or start_time(pid) == started


def _table() -> dict[int, tuple[int, int]]:
    """pid -> (ppid, session) of every process."""
    table = {}
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            fields = _stat(int(entry))
            if fields is not None and fields[2] not in ("Z", "X"):
                table[int(entry)] = (int(fields[3]), int(fields[5]))
    return table


def descendants(root: int, sessions: Iterable[int] = ()) -> list[int]:
    """Every live descendant of ``root``, and every member of ``sessions``."""
    table = _table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _sid) in table.items():
        children.setdefault(ppid, []).append(pid)
    wanted = set(sessions)
    found = {pid for pid, (_ppid, sid) in table.items() if sid in wanted}
    stack = [root, *found]
    while stack:
        for child in children.get(stack.pop(), ()):
            if child not in found:
                found.add(child)
                stack.append(child)
    found.discard(root)
    found.discard(os.getpid())
    return sorted(found)


def become_subreaper() -> bool:
    """Orphans of our tree (daemonised or ``setsid`` children) are re-parented to us."""
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        return libc.prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) == 0
    except (OSError, AttributeError):
        return False


def reap() -> None:
    with contextlib.suppress(ChildProcessError):
        while os.waitpid(-1, os.WNOHANG)[0] > 0:
            pass


def end_tree(root: int, sessions: Iterable[int] = (), grace_s: float = 3.0) -> list[int]:
    """SIGTERM every descendant of ``root`` and member of ``sessions``, then SIGKILL what is
    left after ``grace_s``. Returns the pids signalled."""
    sessions = list(sessions)
    targets = descendants(root, sessions)
    for pid in targets:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + grace_s
    left = targets
    while left and time.monotonic() < deadline:
        reap()
        time.sleep(0.1)
        left = descendants(root, sessions)
    for pid in left:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(pid, signal.SIGKILL)
    reap()
    return targets
