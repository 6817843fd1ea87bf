"""Run folders and the `latest` link."""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest
from ansible_collections.sglang_lxc.serving.runner import artifacts
from ansible_collections.sglang_lxc.serving.runner.artifacts import (
    LATEST,
    find_run,
    mark_latest,
    new_run_id,
)
from ansible_collections.sglang_lxc.serving.runner.errors import RunError


def make_run(root: Path, name: str, mtime: float) -> Path:
    run_dir = root / name
    run_dir.mkdir(parents=True)
    todo = run_dir / "todo.json"
    todo.write_text("{}")
    os.utime(todo, (mtime, mtime))
    return run_dir


def test_run_ids_sort_by_time_and_name_the_playbook():
    run_id = new_run_id(Path("/x/site.yml"))
    assert re.fullmatch(r"\d{8}T\d{6}Z-site-[0-9a-f]{4}", run_id), run_id


def test_a_run_id_drawn_twice_gets_a_folder_of_its_own(tmp_path, monkeypatch):
    drawn = iter(["20261207T200000Z-site-3f9a", "20261207T200000Z-site-3f9a",
                  "20261207T200000Z-site-77c0"])
    monkeypatch.setattr(artifacts, "new_run_id", lambda playbook: next(drawn))
    first = artifacts.new_run_dir(tmp_path / "runs", Path("site.yml"))
    second = artifacts.new_run_dir(tmp_path / "runs", Path("site.yml"))
    assert first.name == "20261207T200000Z-site-3f9a" and first.is_dir()
    assert second.name == "20261207T200000Z-site-77c0" and second.is_dir()


def test_latest_link_wins_then_the_newest_run(tmp_path):
    old = make_run(tmp_path, "a-old", 1_000)
    new = make_run(tmp_path, "b-new", 2_000)
    assert find_run(tmp_path) == new  # no link yet: newest todo.json
    mark_latest(tmp_path, old)
    assert (tmp_path / LATEST).is_symlink()
    assert find_run(tmp_path) == old.resolve()
    mark_latest(tmp_path, new)
    assert find_run(tmp_path) == new.resolve()
    assert find_run(tmp_path, "a-old") == old


def test_unknown_or_missing_runs_are_errors(tmp_path):
    with pytest.raises(RunError, match="no run found"):
        find_run(tmp_path)
    with pytest.raises(RunError, match="no checklist for run 'zzz'"):
        find_run(tmp_path, "zzz")
