"""Turn ansible-runner events into checklist changes.

``ChecklistReducer.handle(event)`` takes one event dict as ansible-runner hands it to an
``event_handler`` (or as stored in ``job_events/*.json``) and updates the checklist; it does
a few dict look-ups per event and nothing else. ``finish()`` settles what is left when the
run ends. It only reads task names, the task's path, ``res["msg"]``/``stderr`` of failures and
``res["ansible_stats"]`` of ``set_stats`` results: never an event's ``stdout`` or task
arguments, and ``res`` of a ``no_log`` task is already censored by ansible-runner.

Role contract (docs/runner.md): ``ansible.builtin.set_stats`` with ``data.todo_details``
(a finding shown on the item) or ``data.todo_skip`` (mark the milestone skipped, with a reason).
Either is a string for the host the task ran on, or a mapping ``{host: string}``.
``data.todo_progress`` (``{host: {"text": ..., <fields>}}``) is what the play is doing now,
e.g. load progress: each report replaces the last one (``TodoItem.activity``).
``data.prometheus_targets`` (``{host: [file_sd entry]}``) goes to ``Checklist.targets``
(``targets.py``), written as ``prometheus_targets.json``.
"""

from __future__ import annotations

import json
import logging
import re
import time
from collections.abc import Callable
from typing import Any

from .checklist import Checklist, ExitCode, Status, TodoItem, now_iso
from .planner import Plan, PlannedPlay
from .targets import TARGETS_KEY

log = logging.getLogger(__name__)

DETAILS_KEY = "todo_details"
SKIP_KEY = "todo_skip"
PROGRESS_KEY = "todo_progress"
MAX_ACTIVITY_JSON = 16_000  # an activity report larger than this keeps its text only
MAX_MESSAGE = 400
_ANSI = re.compile(r"\x1b\[[0-9;]*[A-Za-z]")
# ansible-runner appends _<n> to the play uuid for each further batch of a serial play
_BATCH_SUFFIX = re.compile(r"_\d+$")
_NOISE = {
    "non-zero return code",
    "MODULE FAILURE",
    "MODULE FAILURE\nSee stdout/stderr for the exact error",
}

ChangeCallback = Callable[[TodoItem, Status], None]

# What an unreachable host's message says when ssh exited 255 without a word of its own.
SILENT_SSH = ("ssh printed no error (exit 255): the connection was cut mid-task, as when the host "
              "reboots, stops or drops off the network; run again once it answers over ssh")


def _clip(text: str, limit: int = MAX_MESSAGE) -> str:
    text = _ANSI.sub("", text).strip()
    return text if len(text) <= limit else text[: limit - 1] + "…"


def failure_message(res: dict[str, Any] | None) -> str:
    """A one-line reason from a failed (or unreachable) task result."""
    if not isinstance(res, dict):
        return ""
    if "censored" in res:
        return "output hidden (no_log)"
    results = res.get("results")
    if isinstance(results, list):
        for sub in results:
            if isinstance(sub, dict) and sub.get("failed"):
                return failure_message(sub)
    msg = str(res.get("msg") or "").strip()
    if not msg or msg in _NOISE:
        for key in ("stderr", "stdout", "module_stderr", "module_stdout"):
            stream = res.get(key)
            if isinstance(stream, str) and stream.strip():
                tail = stream.strip().splitlines()[-1]
                msg = f"{msg}: {tail}" if msg else tail
                break
        else:
            if "rc" in res and not msg:
                msg = f"rc={res['rc']}"
    return _clip(msg)


_FILTERS = re.compile(r"\s*\|\s*(int|bool|string|trim|lower|float)\b(\(\))?")
_DEFAULT = re.compile(r"\s*\|\s*default\((?:[^()]|\([^()]*\))*\)")
_NEGATE = {">": "<=", ">=": "<", "<": ">=", "<=": ">", "==": "!=", "!=": "=="}
_COMPARE = re.compile(r"^(?P<left>.+?)\s*(?P<op>>=|<=|==|!=|>|<)\s*(?P<right>.+)$")


def _negate(condition: str) -> str:
    """A condition that was false, said as what is true: ``gpu_count | int > 0`` ->
    ``gpu_count <= 0``; ``x | bool`` -> ``x is false``; ``x is defined`` -> ``x is not defined``."""
    text = " ".join(str(condition).split())
    text = _DEFAULT.sub("", _FILTERS.sub("", text)).strip()
    if text.startswith("(") and text.endswith(")") and text.count("(") == 1:
        text = text[1:-1].strip()
    if " and " in text or " or " in text:
        return f"not ({text})"
    if text.startswith("not "):
        rest = text[4:].strip()
        if rest.startswith("(") and rest.endswith(")") and rest.count("(") == 1:
            rest = rest[1:-1].strip()
        return f"{rest} is true"
    for positive, negative in ((" is not ", " is "), (" is ", " is not "),
                               (" not in ", " in "), (" in ", " not in ")):
        if positive in text:
            left, _sep, right = text.partition(positive)
            return f"{left}{negative}{right}"
    match = _COMPARE.match(text)
    if match:
        left, right = match["left"], match["right"]
        if left.endswith(" | length") and match["op"] == ">" and right == "0":
            return f"{left[: -len(' | length')]} is empty"
        return f"{left} {_NEGATE[match['op']]} {right}"
    if re.fullmatch(r"[\w.\[\]'\"]+", text):
        return f"{text} is false"
    return f"not ({text})"


def skip_reason(conditions: list[str]) -> str:
    """``skipped: gpu_count <= 0`` from the ``when`` that was false (or the play's list)."""
    if len(conditions) == 1:
        return _clip(f"skipped: {_negate(conditions[0])}")
    return _clip("skipped: not all of " + "; ".join(" ".join(c.split()) for c in conditions))


def _as_text(value: Any) -> str:
    if value is None or value is False:
        return ""
    if isinstance(value, list | tuple):
        return "; ".join(_as_text(v) for v in value if _as_text(v))
    return _clip(str(value))


def _per_host(value: Any, host: str) -> dict[str, str]:
    """``todo_details``/``todo_skip`` value -> {host: text}."""
    if isinstance(value, dict):
        return {str(h): _as_text(v) for h, v in value.items()}
    if value is True:
        return {host: "skipped by the role"}
    return {host: _as_text(value)}


def _stats_data(res: dict[str, Any]) -> list[dict[str, Any]]:
    found = []
    stats = res.get("ansible_stats")
    if isinstance(stats, dict) and isinstance(stats.get("data"), dict):
        found.append(stats["data"])
    for sub in res.get("results") or ():
        if isinstance(sub, dict):
            stats = sub.get("ansible_stats")
            if isinstance(stats, dict) and isinstance(stats.get("data"), dict):
                found.append(stats["data"])
    return found


class ChecklistReducer:
    """Fold ansible-runner events into a ``Checklist``."""

    def __init__(
        self,
        checklist: Checklist,
        plan: Plan | None = None,
        on_change: ChangeCallback | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.checklist = checklist
        self.plan = plan or Plan(playbook="")
        self._on_change = on_change
        self._clock = clock
        self._play_uuids: dict[str, int] = {}
        self._planned_by_index: dict[int, PlannedPlay] = {}
        self._current: int | None = None
        self._next_planned = 0  # position in plan.plays of the next play expected to start
        self._dead: dict[str, TodoItem] = {}  # host -> the item where it failed
        # task definitions (file:line) that reported on each item, for tasks_done/tasks_total
        self._seen: dict[str, set[str]] = {}
        self._known: dict[int, frozenset[str]] = {}  # play index -> planned task definitions
        self._stats_seen = False
        self._handlers = {
            "playbook_on_play_start": self._play_start,
            "runner_on_start": self._runner_start,
            "runner_on_ok": self._runner_ok,
            "runner_on_skipped": self._runner_skipped,
            "runner_on_failed": self._runner_failed,
            "runner_on_unreachable": self._runner_unreachable,
            "playbook_on_stats": self._stats,
        }
        if plan is not None:
            self.load_plan(plan)

    # -- plan --------------------------------------------------------------------------------
    def load_plan(self, plan: Plan) -> None:
        """Add every planned item as pending (call before the first event of its plays).

        A further plan (the next playbook of the same ansible-playbook command) is appended.
        """
        if self.plan.plays or self._planned_by_index:
            self.plan.plays.extend(plan.plays)
            self.plan.conditions.update(plan.conditions)
        else:
            self.plan = plan
        for planned in plan.plays:
            self._planned_by_index[planned.index] = planned
            if planned.task_paths:
                self._known[planned.index] = frozenset(planned.task_paths)
            for host in planned.hosts:
                self._new_item(planned, host)
        self.checklist.run.notes.extend(plan.notes)

    def _new_item(self, planned: PlannedPlay, host: str) -> TodoItem:
        return self.checklist.add(
            TodoItem(
                id=f"{planned.index}-{host}",
                content=self.plan.content_for(planned, host),
                host=host,
                play=planned.name,
                play_index=planned.index,
                priority=planned.priority,
                tasks_total=planned.tasks_total,
            )
        )

    # -- events ------------------------------------------------------------------------------
    def handle(self, event: dict[str, Any]) -> None:
        handler = self._handlers.get(event.get("event", ""))
        if handler is not None:
            handler(event.get("event_data") or {})

    def _set_status(self, item: TodoItem, status: Status, message: str | None = None) -> None:
        old = item.status
        item.status = status
        if message is not None:
            item.message = message
        now = self._clock()
        if status is Status.IN_PROGRESS and item.started is None:
            item.started = now_iso()
            item._t0 = now
        elif status.finished:
            item.finished = now_iso()
            if item._t0 is not None:
                item.duration_s = round(now - item._t0, 3)
        if self._on_change is not None and (old is not status or message is not None):
            self._on_change(item, old)

    def _changed(self, item: TodoItem) -> None:
        if self._on_change is not None:
            self._on_change(item, item.status)

    def _play_start(self, data: dict[str, Any]) -> None:
        uuid = _BATCH_SUFFIX.sub("", str(data.get("play_uuid") or data.get("uuid") or ""))
        if uuid in self._play_uuids:  # serial: the next batch of the same play
            for item in self.checklist.for_play(self._play_uuids[uuid]):
                if item.status is Status.IN_PROGRESS:
                    self._settle(item)
            return
        if self._current is not None:
            self._finish_play(self._current)
        name = str(data.get("name") or data.get("play") or "").strip()
        planned = self._match_planned(name, str(data.get("pattern") or ""))
        self._play_uuids[uuid] = planned.index
        self._current = planned.index
        for item in self.checklist.for_play(planned.index):
            dead = self._dead.get(item.host)
            if dead is not None and item.status is Status.PENDING:
                self._cancel_for_dead_host(item, dead)

    def _match_planned(self, name: str, pattern: str) -> PlannedPlay:
        plays = self.plan.plays
        for pos in range(self._next_planned, len(plays)):
            if plays[pos].name == name or (not name and plays[pos].pattern == pattern):
                self._next_planned = pos + 1
                return plays[pos]
        # not in the plan (the planner failed, or the playbook changed under us): add it
        index = max([p.index for p in plays] + list(self._play_uuids.values()) + [0]) + 1
        planned = PlannedPlay(index=index, name=name or pattern, pattern=pattern, hosts=[])
        plays.append(planned)  # after every planned play: the pointer stays where it is
        self._planned_by_index[index] = planned
        return planned

    def _item(self, data: dict[str, Any]) -> TodoItem | None:
        host = data.get("host")
        if not host or self._current is None:
            return None
        item = self.checklist.get(self._current, host)
        if item is None:  # a host added during the run (add_host) or missing from the plan
            planned = self._planned_by_index[self._current]
            item = self._new_item(planned, host)
            self._changed(item)
        return item

    def _runner_start(self, data: dict[str, Any]) -> None:
        item = self._item(data)
        if item is None:
            return
        dead = self._dead.get(item.host)
        if dead is not None and dead is not item:
            self._revive(item.host, dead)
        if item.status is not Status.FAILED:  # keep the failing task's name
            item.task = str(data.get("task") or "")
        if item.stopped:
            return
        if item.status in (Status.PENDING, Status.CANCELLED):
            self._set_status(item, Status.IN_PROGRESS, message="")
        elif item.status is Status.IN_PROGRESS:
            self._changed(item)

    def _count(self, data: dict[str, Any], kind: str) -> TodoItem | None:
        """One task result: ``ok`` (``changed`` too when it changed), ``skipped`` or ``failed``.

        ``tasks_done`` counts task definitions (file:line), so a loop, a handler notified twice
        or a task included several times counts once; a definition the plan did not hold (from
        an include, a handler) adds one to ``tasks_total`` too, so done never passes total.
        """
        item = self._item(data)
        if item is None:
            return None
        key = str(data.get("task_path") or data.get("task_uuid") or data.get("task") or "")
        seen = self._seen.setdefault(item.id, set())
        if key not in seen:
            seen.add(key)
            item.tasks_done += 1
            known = self._known.get(item.play_index)
            if known is not None and key not in known:
                item.tasks_total = (item.tasks_total or 0) + 1  # from an include, a handler
            if item.tasks_total is None or item.tasks_done > item.tasks_total:
                item.tasks_total = item.tasks_done
        if kind == "ok":
            item.ok += 1
            res = data.get("res")
            if isinstance(res, dict) and res.get("changed") is True:
                item.changed += 1
        elif kind == "skipped":
            item.skipped += 1
        else:
            item.failed += 1
        return item

    def _runner_ok(self, data: dict[str, Any]) -> None:
        item = self._count(data, "ok")
        if item is None:
            return
        res = data.get("res")
        if isinstance(res, dict) and ("ansible_stats" in res or "results" in res):
            for stats in _stats_data(res):
                self._apply_stats(item, stats)

    def _apply_activity(self, item: TodoItem, value: Any) -> None:
        """``todo_progress``: replace each named host's activity with the new report."""
        reports = value if isinstance(value, dict) and all(
            isinstance(v, dict | str) for v in value.values()) and "text" not in value else {
            item.host: value}
        for host, report in reports.items():
            target = item if host == item.host else self.checklist.get(item.play_index, str(host))
            if target is None:
                continue
            activity = dict(report) if isinstance(report, dict) else {"text": str(report)}
            activity["text"] = _clip(str(activity.get("text") or ""))
            if len(json.dumps(activity, default=str)) > MAX_ACTIVITY_JSON:
                activity = {"text": activity["text"]}
            if activity != target.activity:
                target.activity = activity
                self._changed(target)

    def _apply_stats(self, item: TodoItem, data: dict[str, Any]) -> None:
        if data.get(TARGETS_KEY) is not None:
            self.checklist.targets.update(data[TARGETS_KEY], item.host)
        if data.get(PROGRESS_KEY) not in (None, "", False):
            self._apply_activity(item, data[PROGRESS_KEY])
        for key in (DETAILS_KEY, SKIP_KEY):
            if key not in data or data[key] in (None, "", False):
                continue
            for host, text in _per_host(data[key], item.host).items():
                target = item if host == item.host else self.checklist.get(item.play_index, host)
                if target is None or not text:
                    continue
                if key == DETAILS_KEY:
                    if text not in target.details.split("; "):
                        target.details = f"{target.details}; {text}" if target.details else text
                else:
                    target.skip_requested = True
                    target.message = text
                self._changed(target)

    def _runner_skipped(self, data: dict[str, Any]) -> None:
        item = self._count(data, "skipped")
        if item is None:
            return
        res = data.get("res")
        false_condition = res.get("false_condition") if isinstance(res, dict) else None
        if false_condition:
            item.last_skip_reason = skip_reason([str(false_condition)])
        else:
            conditions = self.plan.conditions.get(str(data.get("task_path") or ""))
            if conditions:
                item.last_skip_reason = skip_reason(conditions)

    def _runner_failed(self, data: dict[str, Any]) -> None:
        if data.get("ignore_errors"):
            self._count(data, "ok")
            return
        item = self._count(data, "failed")
        if item is None:
            return
        item.task = str(data.get("task") or "")
        self._dead[item.host] = item
        self._set_status(item, Status.FAILED, message=failure_message(data.get("res")))
        if data.get("any_errors_fatal"):
            self._stop_play(item)

    def _stop_play(self, failed: TodoItem) -> None:
        """any_errors_fatal: ansible ends the play (and the run) for every host."""
        why = f"stopped: {failed.host} failed in {failed.task!r} (any_errors_fatal)"
        for item in self.checklist.for_play(failed.play_index):
            if item is not failed and not item.status.finished:
                item.stopped = True
                self._set_status(item, Status.CANCELLED, message=why)

    def _runner_unreachable(self, data: dict[str, Any]) -> None:
        item = self._item(data)
        if item is None:
            return
        item.task = str(data.get("task") or "")
        item.unreachable = True
        self._dead[item.host] = item
        message = failure_message(data.get("res")) or "host unreachable"
        if message.endswith(":"):
            # ansible's ssh plugin ends "... can be reached over ssh:" with ssh's stderr, which a
            # connection cut mid-task (a reboot) leaves empty
            message = f"{message} {SILENT_SSH}"
        self._set_status(item, Status.FAILED, message=_clip(f"unreachable: {message}"))

    def _stats(self, data: dict[str, Any]) -> None:
        if self._current is not None:
            self._finish_play(self._current)
            self._current = None
        self._stats_seen = True
        failures = data.get("failures") or {}
        dark = data.get("dark") or {}
        for host, item in list(self._dead.items()):
            if not failures.get(host) and not dark.get(host):
                # ansible counted no failure for the host: every failure of it was rescued
                self._revive(host, item)

    # -- settling ----------------------------------------------------------------------------
    def _settle(self, item: TodoItem) -> None:
        """An item whose play ended for its host: completed or skipped."""
        dead = self._dead.get(item.host)
        if dead is not None and dead is not item:
            self._cancel_for_dead_host(item, dead)
            return
        item.task = ""  # "task" is the running or the failing one
        if item.skip_requested:
            self._set_status(item, Status.SKIPPED, message=item.message)
        elif item.ok == 0:
            reason = item.last_skip_reason or (
                "all tasks skipped" if item.skipped else "no task ran on this host"
            )
            self._set_status(item, Status.SKIPPED, message=reason)
        else:
            self._set_status(item, Status.COMPLETED)

    def _finish_play(self, index: int) -> None:
        for item in self.checklist.for_play(index):
            if not item.status.finished:
                self._settle(item)
        for host, failed in self._dead.items():
            if failed.play_index == index:
                for later in self.checklist.for_host(host):
                    if later.play_index != index and later.status is Status.PENDING:
                        self._cancel_for_dead_host(later, failed)

    def _cancel_for_dead_host(self, item: TodoItem, failed: TodoItem) -> None:
        why = "unreachable" if failed.unreachable else "failed"
        self._set_status(
            item, Status.CANCELLED, message=f"not run: {item.host} {why} earlier ({failed.content})"
        )

    def _revive(self, host: str, failed: TodoItem) -> None:
        """The host went on after ``failed`` (rescued, ignore_unreachable): undo the failure."""
        del self._dead[host]
        note = f"recovered after {failed.task!r} failed: {failed.message}"
        failed.unreachable = False
        self._set_status(failed, Status.COMPLETED, message=_clip(note))
        for item in self.checklist.for_host(host):
            if item.status is Status.CANCELLED and item.message.startswith("not run:"):
                self._set_status(item, Status.PENDING, message="")

    def finish(self, *, interrupted: bool, ansible_rc: int | None) -> ExitCode:
        """Settle every unfinished item once the run is over; return the run's exit code."""
        if interrupted:
            for item in self.checklist.items:
                if item.status is Status.IN_PROGRESS:
                    task = f" during {item.task!r}" if item.task else ""
                    self._set_status(item, Status.CANCELLED, message=f"interrupted{task}")
                elif item.status is Status.PENDING:
                    self._set_status(item, Status.CANCELLED, message="interrupted before it ran")
        else:
            if self._current is not None and self._stats_seen:
                self._finish_play(self._current)
            for item in self.checklist.items:
                if item.status.finished:
                    continue
                dead = self._dead.get(item.host)
                if dead is not None:
                    self._cancel_for_dead_host(item, dead)
                elif self._stats_seen:
                    self._set_status(item, Status.CANCELLED, message="not run: the run ended first")
                else:
                    self._set_status(
                        item,
                        Status.CANCELLED,
                        message=f"not run: ansible-playbook stopped (rc={ansible_rc})",
                    )
        if self.checklist.targets.ignored:
            self.checklist.run.notes.append(
                f"{TARGETS_KEY}: {self.checklist.targets.ignored} entries were not "
                "{targets, labels} and were left out")
        code = self.checklist.outcome(interrupted, ansible_rc)
        self.checklist.set_outcome(code)
        self.checklist.run.ansible_rc = ansible_rc
        self.checklist.run.finished = now_iso()
        return code
