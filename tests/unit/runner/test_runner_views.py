"""Live table and plain lines."""

from __future__ import annotations

import io
import threading

from ansible_collections.sglang_lxc.serving.runner.checklist import (
    Checklist,
    RunInfo,
    Status,
    TodoItem,
)
from ansible_collections.sglang_lxc.serving.runner.render_live import (
    LiveView,
    PlainView,
    checklist_table,
    choose_view,
)
from rich.console import Console


class Tty(io.StringIO):
    def isatty(self) -> bool:
        return True


def checklist() -> Checklist:
    cl = Checklist(run=RunInfo(id="r", playbook="/p/site.yml"))
    cl.add(TodoItem(id="1-a", content="Install CUDA on a", host="a", play="p", play_index=1,
                    priority="high"))
    return cl


def test_choose_view(monkeypatch):
    monkeypatch.delenv("CI", raising=False)
    monkeypatch.setenv("TERM", "xterm")
    assert choose_view("auto", Tty()) == "live"
    assert choose_view("auto", io.StringIO()) == "plain"
    monkeypatch.setenv("CI", "true")
    assert choose_view("auto", Tty()) == "plain"
    monkeypatch.setenv("CI", "false")
    assert choose_view("auto", Tty()) == "live"
    assert choose_view("plain", Tty()) == "plain"


def test_plain_view_prints_status_and_findings_changes_only():
    cl = checklist()
    out = io.StringIO()
    view = PlainView(cl, stream=out)
    view.planned()
    item = cl.items[0]
    item.status = Status.IN_PROGRESS
    item.task = "CUDA | one"
    view.changed(item, Status.PENDING)
    item.task = "CUDA | two"
    view.changed(item, Status.IN_PROGRESS)  # same status, same findings: no line
    item.details = "MAX_JOBS=20"
    view.changed(item, Status.IN_PROGRESS)
    item.activity = {"text": "gpu0 loading 43% (235/547 GB, 1.9 GB/s, ETA 2m40s)"}
    view.changed(item, Status.IN_PROGRESS)  # a new progress report: a line
    lines = out.getvalue().splitlines()
    assert lines == [
        "checklist: 1 todos",
        "[pending] (high) Install CUDA on a",
        "[in_progress] (high) Install CUDA on a — 0 tasks · CUDA | one",
        "[in_progress] (high) Install CUDA on a — MAX_JOBS=20 — 0 tasks · CUDA | two",
        "[in_progress] (high) Install CUDA on a — MAX_JOBS=20 — gpu0 loading 43% (235/547 GB,"
        " 1.9 GB/s, ETA 2m40s) — 0 tasks · CUDA | two",
    ]


def test_live_view_draws_the_table_and_prints_it_at_the_end():
    cl = checklist()
    out = Tty()
    console = Console(file=out, force_terminal=True, width=120)
    view = LiveView(cl, console=console, lock=threading.Lock())
    view.start()
    cl.items[0].status = Status.COMPLETED
    view.stop(["/tmp/todo.json"])
    text = out.getvalue()
    assert "Install CUDA on a" in text and "completed" in text and "/tmp/todo.json" in text


def test_table_has_a_row_per_item():
    table = checklist_table(checklist())
    assert table.row_count == 1
