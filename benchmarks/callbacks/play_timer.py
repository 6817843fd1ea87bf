"""Benchmark callback: seconds and task counts per play, written as JSON (benchmarks/noop_rerun.py).

Enabled only by the benchmark (ANSIBLE_CALLBACKS_ENABLED), never by ansible.cfg. The file named
by PLAY_TIMER_OUT receives one entry per play: name, seconds from its start to the next play's
start (or to the recap), tasks started, and per-host results (ok, changed, skipped, failed);
and each task's seconds (from its start to the next task's start, so a task's wait for all
hosts counts).
"""

from __future__ import annotations

import json
import os
import time

from ansible.plugins.callback import CallbackBase

DOCUMENTATION = """
name: play_timer
type: aggregate
short_description: seconds and task counts per play, as JSON (benchmarks only)
description:
  - Writes a JSON list of plays to the file named by the PLAY_TIMER_OUT environment variable.
requirements:
  - enable with ANSIBLE_CALLBACKS_ENABLED
"""


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "play_timer"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._plays: list[dict] = []
        self._tasks: list[list] = []  # [play index, task name, seconds]
        self._task_start = None
        self._t0 = time.monotonic()

    def _end_task(self, now: float) -> None:
        if self._task_start is not None:
            self._tasks[-1][2] = round(now - self._task_start, 3)
            self._task_start = None

    def _close(self, now: float) -> None:
        if self._plays and "seconds" not in self._plays[-1]:
            self._plays[-1]["seconds"] = round(now - self._plays[-1].pop("_start"), 3)

    def v2_playbook_on_play_start(self, play) -> None:
        now = time.monotonic()
        self._end_task(now)
        self._close(now)
        self._plays.append({"name": play.get_name(), "_start": now, "tasks": 0, "ok": 0,
                            "changed": 0, "skipped": 0, "failed": 0})

    def v2_playbook_on_task_start(self, task, is_conditional) -> None:
        if self._plays:
            now = time.monotonic()
            self._end_task(now)
            self._plays[-1]["tasks"] += 1
            self._tasks.append([len(self._plays) - 1, task.get_name(), 0.0])
            self._task_start = now

    def v2_playbook_on_handler_task_start(self, task) -> None:
        self.v2_playbook_on_task_start(task, False)

    def _count(self, key: str) -> None:
        if self._plays:
            self._plays[-1][key] += 1

    def v2_runner_on_ok(self, result) -> None:
        self._count("changed" if result._result.get("changed") else "ok")

    def v2_runner_on_skipped(self, result) -> None:
        self._count("skipped")

    def v2_runner_on_failed(self, result, ignore_errors=False) -> None:
        self._count("failed")

    def v2_runner_on_unreachable(self, result) -> None:
        self._count("failed")

    def v2_playbook_on_stats(self, stats) -> None:
        now = time.monotonic()
        self._end_task(now)
        self._close(now)
        out = os.environ.get("PLAY_TIMER_OUT")
        if out:
            with open(out, "w", encoding="utf-8") as handle:
                json.dump({"plays": self._plays, "tasks": self._tasks,
                           "ansible_s": round(now - self._t0, 3)}, handle)
