"""The run as a todo checklist: todo.json, todo.md, junit.xml, and a live checklist on a terminal.

An aggregate (notification) callback: it runs beside the stdout callback (the default one,
ansible-runner's ``awx_display``), ARA's recorder or junit, never instead of them.
"""

from __future__ import annotations

DOCUMENTATION = """
name: todo
type: aggregate
short_description: the run as a todo checklist (todo.json, todo.md, junit.xml, live view)
description:
  - One milestone per play and host, listed as pending before the first task, then
    in_progress, completed, failed, skipped or cancelled, with the task counts (ok, changed,
    failed, skipped) and what the roles reported through C(set_stats) (todo_details, todo_skip,
    todo_progress).
  - Writes C(todo.json), C(todo.md) and C(junit.xml) into one folder per run, and shows a
    compact checklist on a terminal. Under ansible-runner (C(sglang-lxc run), AWX) the folder is
    ansible-runner's artifact folder of the job.
  - When roles publish Prometheus targets (C(set_stats) prometheus_targets), also writes
    C(prometheus_targets.json) there, the file_sd list of every host's targets.
  - See docs/runner.md.
requirements:
  - enable in configuration (callbacks_enabled = sglang_lxc.serving.todo); its checklist
    model is the collection's runner/ folder (the same code as the sglang-lxc command)
options:
  artifacts_dir:
    description:
      - Folder that receives one sub-folder per run (named like C(20261130T043728Z-site-3f9a))
        and a C(latest) link to the last one. A relative path is taken from the current
        directory (when set in ansible.cfg, from the folder of ansible.cfg). Not used under
        ansible-runner, which names the folder itself (C(AWX_ISOLATED_DATA_DIR)).
    type: path
    default: artifacts
    env:
      - name: SGLANG_LXC_ARTIFACTS
    ini:
      - section: callback_todo
        key: artifacts_dir
  live:
    description:
      - Print the checklist's changes between ansible's own output when stdout is a terminal
        (never in a file or a pipe, never under ansible-runner).
    type: bool
    default: true
    env:
      - name: SGLANG_LXC_TODO_LIVE
    ini:
      - section: callback_todo
        key: live
"""

import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path
from typing import Any

from ansible.plugins.callback import CallbackBase
from ansible_collections.sglang_lxc.serving.runner import artifacts, reports
from ansible_collections.sglang_lxc.serving.runner.checklist import (
    Checklist,
    RunInfo,
    Status,
    TodoItem,
    now_iso,
)
from ansible_collections.sglang_lxc.serving.runner.events import ChecklistReducer
from ansible_collections.sglang_lxc.serving.runner.planner import Plan, plan_plays
from ansible_collections.sglang_lxc.serving.runner.procs import start_time
from ansible_collections.sglang_lxc.serving.runner.render_live import compact_line, summary_line

WRITE_INTERVAL_S = 0.5
RUNNER_DIR_ENV = "AWX_ISOLATED_DATA_DIR"  # ansible-runner's artifact folder of the job


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "todo"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.checklist = Checklist()
        self.reducer = ChecklistReducer(self.checklist, on_change=self._on_change)
        self.run_dir: Path | None = None
        self.lock = threading.Lock()
        self._dirty = False
        self._status_changed = False
        self._last_write = 0.0
        self._live = False
        self._next_index = 1
        self._stop = threading.Event()
        self._flusher: threading.Thread | None = None
        self._errors = 0
        self._shown_activity: dict[str, str] = {}
        self._targets_written = 0  # TargetSet.version last written to prometheus_targets.json

    # -- set-up ------------------------------------------------------------------------------
    def _start_run(self, playbook: str) -> None:
        runner_dir = os.environ.get(RUNNER_DIR_ENV)
        if runner_dir:
            self.run_dir = Path(runner_dir)
            self.run_dir.mkdir(parents=True, exist_ok=True)
            root = None
        else:
            root = Path(self.get_option("artifacts_dir")).resolve()
            self.run_dir = artifacts.new_run_dir(root, Path(playbook))
        runner_pid = os.environ.get("SGLANG_LXC_RUNNER_PID", "")
        self.checklist.run = RunInfo(
            id=self.run_dir.name, playbook=playbook, artifact_dir=str(self.run_dir),
            started=now_iso(), host=socket.gethostname(), pid=os.getpid(),
            pid_started=start_time(os.getpid()),
            runner_pid=int(runner_pid) if runner_pid.isdigit() else None,
        )
        if root is not None:
            artifacts.mark_latest(root, self.run_dir)
        self._live = bool(self.get_option("live")) and not runner_dir and sys.stdout.isatty()
        self._flusher = threading.Thread(target=self._flush_loop, name="todo-json", daemon=True)
        self._flusher.start()

    def _flush_loop(self) -> None:
        while not self._stop.wait(WRITE_INTERVAL_S):
            with self.lock:
                if self._dirty:
                    self._write_json()

    def _write_json(self) -> None:
        if self.run_dir is None:
            return
        try:
            reports.write_json(self.checklist, self.run_dir)
        except OSError as exc:
            self._errors += 1
            if self._errors == 1:
                self._display.warning(f"todo: cannot write {self.run_dir}: {exc}")
        self._dirty = False
        self._status_changed = False
        self._last_write = time.monotonic()

    def _write_targets(self) -> None:
        """prometheus_targets.json, at once when a role published new targets."""
        self._targets_written = self.checklist.targets.version
        if self.run_dir is None:
            return
        try:
            reports.write_targets(self.checklist, self.run_dir)
        except OSError as exc:
            self._errors += 1
            if self._errors == 1:
                self._display.warning(f"todo: cannot write {self.run_dir}: {exc}")

    def _on_change(self, item: TodoItem, old: Status) -> None:
        self._dirty = True
        if item.status is not old:
            self._status_changed = True
            if self._live:
                self._show(item)
        elif self._live and item.activity_text != self._shown_activity.get(item.id, ""):
            self._show(item)  # a new todo_progress report: the live line says it at once
        self._shown_activity[item.id] = item.activity_text

    def _line(self, text: str, status: Status | None = None) -> None:
        """One terminal line, cut to the terminal's width (the live view never wraps)."""
        width = shutil.get_terminal_size((100, 24)).columns
        if len(text) > width:
            text = text[: max(width - 1, 20)] + "…"
        self._display.display(text, color=_COLOURS.get(status) if status else None,
                              screen_only=True)

    def _show(self, item: TodoItem) -> None:
        done = sum(i.status.finished for i in self.checklist.items)
        self._line(f"TODO {done}/{len(self.checklist.items)} {compact_line(item)}", item.status)

    def _feed(self, name: str, data: dict[str, Any]) -> None:
        """One event into the checklist; a reporting bug must never stop the run."""
        try:
            with self.lock:
                self.reducer.handle({"event": name, "event_data": data})
                if self.checklist.targets.version != self._targets_written:
                    self._write_targets()
                if self._status_changed or (
                        self._dirty and time.monotonic() - self._last_write > WRITE_INTERVAL_S):
                    self._write_json()
        except Exception as exc:
            self._errors += 1
            self._display.warning(f"todo: could not read {name}: {type(exc).__name__}: {exc}")

    # -- ansible's callbacks -----------------------------------------------------------------
    def v2_playbook_on_start(self, playbook: Any) -> None:
        path = str(Path(playbook._file_name).resolve())
        if self.run_dir is None:
            self._start_run(path)
        plays = playbook.get_plays()
        if not plays:
            return
        try:
            variable_manager = plays[0].get_variable_manager()
            plan = plan_plays(path, plays, variable_manager._inventory, variable_manager,
                              playbook._loader, first_index=self._next_index,
                              template_hosts=True)
        except Exception as exc:  # items then appear as plays start
            plan = Plan(playbook=path, notes=[f"could not list the plays: {exc}"[:300]])
        self._next_index += len(plays)
        with self.lock:
            self.reducer.load_plan(plan)
            self._write_json()
        if self._live:
            where = os.path.relpath(self.run_dir) if self.run_dir else "?"
            self._line(f"TODO {len(self.checklist.items)} milestones -> {where}/")
            for item in self.checklist.items:
                self._line(f"TODO {compact_line(item)}")

    def v2_playbook_on_play_start(self, play: Any) -> None:
        hosts = play.hosts if isinstance(play.hosts, list) else [play.hosts]
        self._feed("playbook_on_play_start", {
            "name": play.get_name().strip(), "pattern": ",".join(map(str, hosts)),
            "play_uuid": str(play._uuid)})

    def v2_runner_on_start(self, host: Any, task: Any) -> None:
        self._feed("runner_on_start", {"host": host.name, "task": task.get_name().strip()})

    def _result(self, result: Any, **extra: Any) -> dict[str, Any]:
        task = result.task
        return {"host": result.host.name, "task": task.get_name().strip(),
                "task_path": task.get_path(), "res": result.result, **extra}

    def v2_runner_on_ok(self, result: Any) -> None:
        self._feed("runner_on_ok", self._result(result))

    def v2_runner_on_skipped(self, result: Any) -> None:
        self._feed("runner_on_skipped", self._result(result))

    def v2_runner_on_failed(self, result: Any, ignore_errors: bool = False) -> None:
        self._feed("runner_on_failed", self._result(
            result, ignore_errors=ignore_errors,
            any_errors_fatal=bool(getattr(result.task, "any_errors_fatal", False))))

    def v2_runner_on_unreachable(self, result: Any) -> None:
        self._feed("runner_on_unreachable", self._result(result))

    def v2_playbook_on_stats(self, stats: Any) -> None:
        self._feed("playbook_on_stats", {"failures": dict(stats.failures),
                                         "dark": dict(stats.dark)})
        rc = 2 if any(stats.failures.values()) else 4 if any(stats.dark.values()) else 0
        self._stop.set()
        with self.lock:
            self.reducer.finish(interrupted=False, ansible_rc=rc)
            if self._errors:
                self.checklist.run.notes.append(f"todo: {self._errors} callback errors")
            paths = reports.write_all(self.checklist, self.run_dir) if self.run_dir else []
        if self._live:
            self._line("")
            for item in self.checklist.items:
                self._line(f"TODO {compact_line(item, status=True)}", item.status)
            self._line(f"TODO {summary_line(self.checklist)}")
            for path in paths:
                self._line(f"     {os.path.relpath(path)}")


_COLOURS = {
    Status.COMPLETED: "green",
    Status.FAILED: "red",
    Status.SKIPPED: "cyan",
    Status.CANCELLED: "magenta",
    Status.IN_PROGRESS: "yellow",
}
