"""Write the checklist out: ``todo.json``, ``todo.md`` (Markdown summary), ``junit.xml``, and
``prometheus_targets.json`` when roles published Prometheus targets (``targets``).

Only checklist fields are written (titles, statuses, task names, messages and findings); never
an event's stdout or a task's arguments.
"""

from __future__ import annotations

import json
import os
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

from .checklist import Checklist, Status, TodoItem
from .targets import TARGETS_JSON, render

TODO_JSON = "todo.json"
TODO_MD = "todo.md"
JUNIT_XML = "junit.xml"

MARKS = {
    Status.PENDING: "[ ]",
    Status.IN_PROGRESS: "[~]",
    Status.COMPLETED: "[x]",
    Status.FAILED: "[!]",
    Status.SKIPPED: "[-]",
    Status.CANCELLED: "[/]",
}


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as handle:
            handle.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_json(checklist: Checklist, run_dir: Path) -> Path:
    path = run_dir / TODO_JSON
    _atomic_write(path, json.dumps(checklist.to_dict(), indent=2, ensure_ascii=False) + "\n")
    return path


def read_json(path: Path) -> Checklist:
    return Checklist.from_dict(json.loads(path.read_text(encoding="utf-8")))


def item_note(item: TodoItem, counts: bool = True) -> str:
    """What to say after an item's title: findings, then failure/skip reason or progress."""
    parts = []
    if item.details:
        parts.append(item.details)
    if item.status is Status.FAILED:
        parts.append(f"{item.task}: {item.message}" if item.task else item.message)
    elif item.status is Status.IN_PROGRESS:
        if item.activity_text:
            parts.append(item.activity_text)
        parts.append(f"{item.progress} · {item.task}" if item.task else item.progress)
    elif item.message:
        parts.append(item.message)
    if counts and (item.ok or item.failed or item.skipped):
        parts.append(item.result_counts)
    return " — ".join(p for p in parts if p)


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return ""
    minutes, secs = divmod(round(seconds), 60)
    return f"{minutes}m{secs:02d}s" if minutes else f"{seconds:.1f}s"


def _md_escape(text: str) -> str:
    return text.replace("|", "\\|").replace("\n", " ")


def render_markdown(checklist: Checklist) -> str:
    run = checklist.run
    counts = checklist.counts()
    lines = [
        f"# sglang-lxc run `{Path(run.playbook).name or '?'}`: {run.status}",
        "",
        f"- run: `{run.id}`, started {run.started or '?'}, finished {run.finished or '-'}",
        f"- exit code: {run.exit_code if run.exit_code is not None else '-'}"
        f" (ansible-playbook rc {run.ansible_rc if run.ansible_rc is not None else '-'})",
        "- " + ", ".join(f"{n} {s}" for s, n in counts.items() if n),
        "",
        "| | todo | priority | status | changed | notes | time |",
        "| --- | --- | --- | --- | --- | --- | --- |",
    ]
    for item in checklist.items:
        ran = item.ok or item.failed or item.skipped
        lines.append(
            f"| {MARKS[item.status]} | {_md_escape(item.content)} | {item.priority} "
            f"| {item.status.value} | {f'changed {item.changed}' if ran else ''} "
            f"| {_md_escape(item_note(item, counts=False))} | {_duration(item.duration_s)} |"
        )
    if run.notes:
        lines += ["", "Notes:", *[f"- {_md_escape(n)}" for n in run.notes]]
    return "\n".join(lines) + "\n"


def write_markdown(checklist: Checklist, run_dir: Path) -> Path:
    path = run_dir / TODO_MD
    _atomic_write(path, render_markdown(checklist))
    return path


def render_junit(checklist: Checklist) -> ET.ElementTree:
    """One testsuite per play, one testcase per item (host)."""
    root = ET.Element("testsuites", name=f"sglang-lxc {Path(checklist.run.playbook).name}")
    suites: dict[int, ET.Element] = {}
    totals = {"tests": 0, "failures": 0, "skipped": 0, "time": 0.0}
    for item in checklist.items:
        suite = suites.get(item.play_index)
        if suite is None:
            suite = ET.SubElement(root, "testsuite", name=item.play, tests="0", failures="0",
                                  errors="0", skipped="0", time="0")
            suites[item.play_index] = suite
        case = ET.SubElement(
            suite, "testcase", name=item.content, classname=f"{item.play}.{item.host}",
            time=f"{item.duration_s or 0:.3f}",
        )
        suite.set("tests", str(int(suite.get("tests", "0")) + 1))
        suite.set("time", f"{float(suite.get('time', '0')) + (item.duration_s or 0):.3f}")
        totals["tests"] += 1
        totals["time"] += item.duration_s or 0
        if item.status is Status.FAILED:
            failure = ET.SubElement(
                case, "failure", message=item.message,
                type="unreachable" if item.unreachable else "failed",
            )
            failure.text = f"task: {item.task}\n{item.message}"
            suite.set("failures", str(int(suite.get("failures", "0")) + 1))
            totals["failures"] += 1
        elif item.status in (Status.SKIPPED, Status.CANCELLED, Status.PENDING, Status.IN_PROGRESS):
            ET.SubElement(case, "skipped", message=f"{item.status.value}: {item.message}".strip())
            suite.set("skipped", str(int(suite.get("skipped", "0")) + 1))
            totals["skipped"] += 1
        if item.details:
            ET.SubElement(case, "system-out").text = item.details
    root.set("tests", str(totals["tests"]))
    root.set("failures", str(totals["failures"]))
    root.set("skipped", str(totals["skipped"]))
    root.set("time", f"{totals['time']:.3f}")
    ET.indent(root)
    return ET.ElementTree(root)


def write_junit(checklist: Checklist, run_dir: Path) -> Path:
    path = run_dir / JUNIT_XML
    render_junit(checklist).write(path, encoding="utf-8", xml_declaration=True)
    return path


def write_targets(checklist: Checklist, run_dir: Path) -> Path | None:
    """``prometheus_targets.json``: the file_sd list of what the roles published; nothing is
    written (an earlier file stays) when no role published any."""
    if not checklist.targets.reported:
        return None
    path = run_dir / TARGETS_JSON
    _atomic_write(path, render(checklist.targets))
    return path


def write_all(checklist: Checklist, run_dir: Path) -> list[Path]:
    paths = [
        write_json(checklist, run_dir),
        write_markdown(checklist, run_dir),
        write_junit(checklist, run_dir),
    ]
    targets = write_targets(checklist, run_dir)
    if targets is None and (run_dir / TARGETS_JSON).is_file():
        targets = run_dir / TARGETS_JSON  # written by the callback inside ansible-playbook
    return paths if targets is None else [*paths, targets]
