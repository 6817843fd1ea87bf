"""todo.json, todo.md and junit.xml from a checklist."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

from ansible_collections.sglang_lxc.serving.runner.checklist import (
    Checklist,
    ExitCode,
    RunInfo,
    Status,
    TodoItem,
)
from ansible_collections.sglang_lxc.serving.runner.reports import (
    read_json,
    render_markdown,
    write_all,
)


def sample() -> Checklist:
    checklist = Checklist(run=RunInfo(id="r1", playbook="/x/site.yml", started="t0"))
    rows = [
        ("1-ct200", "Stop training on ct200", Status.COMPLETED, "high", "2 processes stopped", ""),
        ("2-ct200", "Install SGLang | fix SM120 on ct200", Status.FAILED, "high", "",
         "pip said no"),
        ("3-ct200", "Launch 8 SGLang instances on ct200", Status.CANCELLED, "medium", "",
         "not run: ct200 failed earlier"),
        ("3-ct201", "Launch 8 SGLang instances on ct201", Status.SKIPPED, "low", "", "no GPU"),
    ]
    for item_id, content, status, priority, details, message in rows:
        play_index = int(item_id[0])
        checklist.add(TodoItem(id=item_id, content=content, host=item_id[2:],
                               play=f"play{play_index}", play_index=play_index,
                               priority=priority, status=status, details=details,
                               message=message, task="SGLang | Install", duration_s=1.5))
    checklist.set_outcome(ExitCode.FAILED)
    return checklist


def test_json_has_the_todo_shape_and_round_trips(tmp_path):
    checklist = sample()
    write_all(checklist, tmp_path)
    data = json.loads((tmp_path / "todo.json").read_text())
    first = data["todos"][0]
    assert {"id", "content", "status", "priority", "host", "details"} <= set(first)
    assert (first["content"], first["status"], first["priority"]) == (
        "Stop training on ct200", "completed", "high")
    assert data["run"]["exit_code"] == 2 and data["run"]["status"] == "failed"
    assert data["counts"]["failed"] == 1
    assert read_json(tmp_path / "todo.json").to_dict() == checklist.to_dict()


def test_markdown_is_a_checklist_table_with_escaped_cells():
    text = render_markdown(sample())
    assert text.startswith("# sglang-lxc run `site.yml`: failed")
    row = "| [x] | Stop training on ct200 | high | completed |  | 2 processes stopped | 1.5s |"
    assert row in text
    assert "Install SGLang \\| fix SM120 on ct200" in text
    assert "SGLang \\| Install: pip said no" in text


def test_junit_counts_failures_and_skips(tmp_path):
    write_all(sample(), tmp_path)
    root = ET.parse(tmp_path / "junit.xml").getroot()
    assert (root.get("tests"), root.get("failures"), root.get("skipped")) == ("4", "1", "2")
    failure = root.find(".//testcase[@name='Install SGLang | fix SM120 on ct200']/failure")
    assert failure is not None and failure.get("message") == "pip said no"
    skipped = root.find(".//testcase[@name='Launch 8 SGLang instances on ct201']/skipped")
    assert skipped is not None and skipped.get("message") == "skipped: no GPU"
    assert len(root.findall("testsuite")) == 3
