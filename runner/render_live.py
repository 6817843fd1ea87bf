"""Show the checklist while the run goes: a rich live table, or plain lines for logs and CI.

``make_view("auto")`` picks the live table on a terminal and plain lines when stdout is not a
TTY or ``CI`` is set. Both only read the checklist; the live table redraws at most
``REFRESH_PER_SECOND`` times a second from its own thread, whatever the event rate.
"""

from __future__ import annotations

import os
import sys
import threading
from typing import TYPE_CHECKING, TextIO

from .checklist import Checklist, ExitCode, Status, TodoItem
from .reports import item_note

if TYPE_CHECKING:  # rich is imported only when a table is drawn: plain runs start faster
    from rich.console import Console, Group
    from rich.table import Table

REFRESH_PER_SECOND = 4
VIEWS = ("auto", "live", "plain")

STYLE = {
    Status.PENDING: ("○", "dim"),
    Status.IN_PROGRESS: ("◐", "bold yellow"),
    Status.COMPLETED: ("✔", "green"),
    Status.FAILED: ("✘", "bold red"),
    Status.SKIPPED: ("↷", "cyan"),
    Status.CANCELLED: ("⊘", "magenta"),
}
PRIORITY_STYLE = {"high": "bold", "medium": "", "low": "dim"}

EXIT_MEANING = {
    ExitCode.OK: "all milestones completed or skipped",
    ExitCode.ERROR: "the playbook could not run",
    ExitCode.FAILED: "milestones failed",
    ExitCode.UNREACHABLE: "hosts unreachable",
    ExitCode.INTERRUPTED: "interrupted",
}


def ci_environment() -> bool:
    value = os.environ.get("CI", "")
    return bool(value) and value.lower() not in ("0", "false", "no")


def checklist_table(checklist: Checklist, title: str | None = None) -> Table:
    from rich.table import Table
    from rich.text import Text

    table = Table(title=title, title_justify="left", expand=False, show_edge=False, pad_edge=False)
    table.add_column("", no_wrap=True)
    table.add_column("todo", overflow="fold")
    table.add_column("prio", no_wrap=True)
    table.add_column("status", no_wrap=True)
    table.add_column("changed", no_wrap=True, justify="right")
    table.add_column("notes", overflow="fold", max_width=70)
    for item in checklist.items:
        mark, style = STYLE[item.status]
        table.add_row(
            Text(mark, style=style),
            Text(item.content),
            Text(item.priority, style=PRIORITY_STYLE.get(item.priority, "")),
            Text(item.status.value, style=style),
            Text(str(item.changed) if item.ok or item.failed or item.skipped else ""),
            Text(item_note(item, counts=False),
                 style="red" if item.status is Status.FAILED else ""),
        )
    return table


def summary_line(checklist: Checklist) -> str:
    counts = ", ".join(f"{n} {s}" for s, n in checklist.counts().items() if n) or "no todos"
    run = checklist.run
    if run.exit_code is None:
        return counts
    meaning = EXIT_MEANING.get(ExitCode(run.exit_code), "") if run.exit_code in set(
        ExitCode) else ""
    return f"{counts} · exit {run.exit_code} ({meaning})"


def plain_line(item: TodoItem) -> str:
    note = item_note(item)
    line = f"[{item.status.value}] ({item.priority}) {item.content}"
    return f"{line} — {note}" if note else line


def compact_line(item: TodoItem, status: bool = False) -> str:
    """``✔ Install SGLang on ct200 — ok 12 · changed 0``: the mark says the status."""
    mark = STYLE[item.status][0]
    word = f"{item.status.value} " if status else ""
    note = item_note(item)
    return f"{mark} {word}{item.content}" + (f" — {note}" if note else "")


class PlainView:
    """One line per change of an item's status or findings (no per-task noise)."""

    def __init__(self, checklist: Checklist, stream: TextIO | None = None) -> None:
        self.checklist = checklist
        self.stream = stream or sys.stdout
        self._shown: dict[str, tuple[Status, str, str]] = {}

    def _write(self, text: str) -> None:
        self.stream.write(text + "\n")
        self.stream.flush()

    def start(self) -> None:
        self._write(f"sglang-lxc: running {self.checklist.run.playbook}")

    def planned(self) -> None:
        """The plan, as the todo callback listed it before the first task: all pending."""
        self._write(f"checklist: {len(self.checklist.items)} todos")
        for item in self.checklist.items:
            self._write(f"[{Status.PENDING.value}] ({item.priority}) {item.content}")
            self._shown[item.id] = (Status.PENDING, "", "")
        for item in self.checklist.items:
            self._show(item)

    def changed(self, item: TodoItem, old: Status) -> None:
        self._show(item)

    def _show(self, item: TodoItem) -> None:
        key = (item.status, item.details, item.activity_text)
        if self._shown.get(item.id) == key:
            return
        self._shown[item.id] = key
        self._write(plain_line(item))

    def stop(self, artifacts: list[str]) -> None:
        self._write("")
        for item in self.checklist.items:
            self._write(plain_line(item))
        self._write(summary_line(self.checklist))
        for path in artifacts:
            self._write(f"  {path}")


class _LiveRenderable:
    def __init__(self, view: LiveView) -> None:
        self.view = view

    def __rich__(self) -> Group:
        from rich.console import Group
        from rich.text import Text

        with self.view.lock:
            run = self.view.checklist.run
            header = Text(f"sglang-lxc · {os.path.basename(run.playbook)} · ", style="bold")
            header.append(summary_line(self.view.checklist), style="")
            if not self.view.checklist.items:
                return Group(header, Text("reading playbook and inventory…", style="dim"))
            return Group(header, checklist_table(self.view.checklist))


class LiveView:
    """A rich live table, redrawn from its own thread; the full table is printed at the end."""

    def __init__(self, checklist: Checklist, console: Console | None = None,
                 lock: threading.Lock | None = None) -> None:
        from rich.console import Console
        from rich.live import Live

        self.checklist = checklist
        self.console = console or Console()
        self.lock = lock or threading.Lock()
        self._live = Live(
            _LiveRenderable(self),
            console=self.console,
            refresh_per_second=REFRESH_PER_SECOND,
            transient=True,
            redirect_stdout=False,
            redirect_stderr=False,
        )

    def start(self) -> None:
        self._live.start()

    def planned(self) -> None:
        pass

    def changed(self, item: TodoItem, old: Status) -> None:
        pass  # the live thread redraws on its own clock

    def stop(self, artifacts: list[str]) -> None:
        self._live.stop()
        self.console.print(checklist_table(self.checklist, title=os.path.basename(
            self.checklist.run.playbook)))
        self.console.print(summary_line(self.checklist), highlight=False)
        for path in artifacts:
            self.console.print(f"  {path}", highlight=False)


def choose_view(mode: str, stream: TextIO | None = None) -> str:
    """``auto`` -> ``live`` on a terminal, ``plain`` when not a TTY or when CI is set."""
    if mode != "auto":
        return mode
    stream = stream or sys.stdout
    if ci_environment() or not stream.isatty() or os.environ.get("TERM") == "dumb":
        return "plain"
    return "live"


def make_view(mode: str, checklist: Checklist, lock: threading.Lock) -> PlainView | LiveView:
    if choose_view(mode) == "live":
        return LiveView(checklist, lock=lock)
    return PlainView(checklist)
