"""The run's todo checklist: one item per play and host, and the run it belongs to.

This module holds plain data only; ``events`` fills it from ansible-runner events and
``reports`` writes it out. ``todo.json`` is ``Checklist.to_dict()``.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field, fields
from datetime import UTC, datetime
from enum import IntEnum, StrEnum
from typing import Any

from .targets import TargetSet

SCHEMA_VERSION = 1


class Status(StrEnum):
    PENDING = "pending"
    IN_PROGRESS = "in_progress"
    COMPLETED = "completed"
    FAILED = "failed"
    SKIPPED = "skipped"
    CANCELLED = "cancelled"

    @property
    def finished(self) -> bool:
        return self not in (Status.PENDING, Status.IN_PROGRESS)


class Priority(StrEnum):
    HIGH = "high"
    MEDIUM = "medium"
    LOW = "low"


DEFAULT_PRIORITY = Priority.MEDIUM


class ExitCode(IntEnum):
    """Exit codes of ``sglang-lxc run`` (documented in docs/runner.md)."""

    OK = 0  # every milestone completed or skipped
    ERROR = 1  # the playbook could not run (syntax error, missing file, ansible crashed)
    FAILED = 2  # at least one milestone failed
    UNREACHABLE = 3  # some hosts were unreachable, no task failed
    USAGE = 64  # bad command line (EX_USAGE)
    INTERRUPTED = 130  # Ctrl-C / SIGINT / SIGTERM: the run was cancelled


def now_iso() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@dataclass
class TodoItem:
    """One milestone: a play on one host."""

    id: str
    content: str
    host: str
    play: str
    play_index: int
    priority: str = DEFAULT_PRIORITY.value
    status: Status = Status.PENDING
    details: str = ""  # what the role found (set_stats todo_details)
    # what the play is doing now, as fields (set_stats todo_progress): {"text": "...", ...}, e.g.
    # the readiness wait's load progress per instance; each report replaces the last one
    activity: dict[str, Any] = field(default_factory=dict)
    task: str = ""  # the current task, or the one that failed
    message: str = ""  # failure message, skip reason or why it was cancelled
    tasks_done: int = 0  # tasks that reported a result on this host (a loop counts once)
    tasks_total: int | None = None  # tasks known so far: the play's own, plus includes/handlers
    ok: int = 0  # task results, as in ansible's PLAY RECAP (changed ones count in ok too)
    changed: int = 0
    failed: int = 0
    skipped: int = 0
    unreachable: bool = False
    started: str | None = None
    finished: str | None = None
    duration_s: float | None = None
    # set_stats "todo_skip": the role declared the milestone skipped
    skip_requested: bool = field(default=False, repr=False)
    last_skip_reason: str = field(default="", repr=False)
    # the play stopped for every host (any_errors_fatal): the item stays cancelled
    stopped: bool = field(default=False, repr=False)
    _t0: float | None = field(default=None, repr=False)

    _PRIVATE = ("skip_requested", "last_skip_reason", "stopped", "_t0")

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        for key in self._PRIVATE:
            data.pop(key, None)
        data["status"] = self.status.value
        return data

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TodoItem:
        known = {f.name for f in fields(cls)} - set(cls._PRIVATE)
        values = {k: v for k, v in data.items() if k in known}
        values["status"] = Status(values.get("status", Status.PENDING))
        return cls(**values)

    @property
    def progress(self) -> str:
        """``3/12 tasks`` (or ``13 tasks`` once includes pushed it past the estimate)."""
        if self.tasks_total:
            return f"{min(self.tasks_done, self.tasks_total)}/{self.tasks_total} tasks"
        return f"{self.tasks_done} tasks"

    @property
    def activity_text(self) -> str:
        """The one-line text of the latest ``todo_progress`` report ('' when none)."""
        return str(self.activity.get("text") or "") if isinstance(self.activity, dict) else ""

    @property
    def result_counts(self) -> str:
        """``ok 12 · changed 0 · skipped 3`` (failed only when there is one)."""
        parts = [f"ok {self.ok}", f"changed {self.changed}"]
        if self.failed:
            parts.append(f"failed {self.failed}")
        if self.skipped:
            parts.append(f"skipped {self.skipped}")
        return " · ".join(parts)


@dataclass
class RunInfo:
    id: str = ""
    playbook: str = ""
    artifact_dir: str = ""
    status: str = "running"  # running | successful | failed | unreachable | interrupted | error
    started: str | None = None
    finished: str | None = None
    exit_code: int | None = None
    ansible_rc: int | None = None
    notes: list[str] = field(default_factory=list)
    # who runs it, so that `status` tells a dead run from a running one
    host: str = ""  # the controller's host name
    pid: int | None = None  # ansible-playbook (the todo callback's process)
    pid_started: int | None = None  # its start time (clock ticks since boot), against pid reuse
    runner_pid: int | None = None  # `sglang-lxc run`, when it runs the playbook


_RUN_STATUS = {
    ExitCode.OK: "successful",
    ExitCode.ERROR: "error",
    ExitCode.FAILED: "failed",
    ExitCode.UNREACHABLE: "unreachable",
    ExitCode.INTERRUPTED: "interrupted",
}


@dataclass
class Checklist:
    run: RunInfo = field(default_factory=RunInfo)
    items: list[TodoItem] = field(default_factory=list)
    # Prometheus targets the roles published (set_stats prometheus_targets): written to
    # prometheus_targets.json beside todo.json, not part of todo.json
    targets: TargetSet = field(default_factory=TargetSet, repr=False, compare=False)

    def __post_init__(self) -> None:
        self._index: dict[tuple[int, str], TodoItem] = {
            (i.play_index, i.host): i for i in self.items
        }

    def add(self, item: TodoItem) -> TodoItem:
        existing = self._index.get((item.play_index, item.host))
        if existing is not None:
            return existing
        self.items.append(item)
        self._index[(item.play_index, item.host)] = item
        return item

    def get(self, play_index: int, host: str) -> TodoItem | None:
        return self._index.get((play_index, host))

    def for_play(self, play_index: int) -> list[TodoItem]:
        return [i for i in self.items if i.play_index == play_index]

    def for_host(self, host: str) -> list[TodoItem]:
        return [i for i in self.items if i.host == host]

    def counts(self) -> dict[str, int]:
        counts = {s.value: 0 for s in Status}
        for item in self.items:
            counts[item.status.value] += 1
        return counts

    def outcome(self, interrupted: bool, ansible_rc: int | None) -> ExitCode:
        """The exit code this checklist stands for (see ExitCode)."""
        if interrupted:
            return ExitCode.INTERRUPTED
        failed = [i for i in self.items if i.status is Status.FAILED]
        if any(not i.unreachable for i in failed) or (ansible_rc == 2 and not failed):
            return ExitCode.FAILED
        if failed or ansible_rc == 4:
            return ExitCode.UNREACHABLE
        if ansible_rc != 0:  # None: ansible-playbook never reported back
            return ExitCode.ERROR
        return ExitCode.OK

    def set_outcome(self, code: ExitCode) -> None:
        self.run.exit_code = int(code)
        self.run.status = _RUN_STATUS.get(code, "error")

    def to_dict(self) -> dict[str, Any]:
        return {
            "version": SCHEMA_VERSION,
            "run": asdict(self.run),
            "counts": self.counts(),
            "todos": [i.to_dict() for i in self.items],
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Checklist:
        run_fields = {f.name for f in fields(RunInfo)}
        run = RunInfo(**{k: v for k, v in data.get("run", {}).items() if k in run_fields})
        return cls(run=run, items=[TodoItem.from_dict(d) for d in data.get("todos", [])])
