"""RunSession with a stand-in for ansible_runner.run fed with recorded events."""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace

import pytest
from sglang_lxc.checklist import ExitCode
from sglang_lxc.cli import main
from sglang_lxc.executor import KEPT_EVENTS, NO_LOG_NOTE, RunOptions, RunSession

PLAYBOOKS = Path(__file__).resolve().parents[2] / "integration" / "runner" / "playbooks"
RECORDINGS = Path(__file__).parent / "recordings"
SECRET = "sk-TOPSECRET-4f1c9e"


def events(name: str) -> list[dict]:
    return json.loads((RECORDINGS / f"{name}.json").read_text())


def session(tmp_path: Path, playbook: str) -> RunSession:
    options = RunOptions(playbook=str(PLAYBOOKS / playbook),
                         inventories=[str(PLAYBOOKS / "inventory.yml")],
                         artifacts=str(tmp_path / "artifacts"), view="plain")
    return RunSession(options)


def fake_runner(recorded: list[dict], rc: int, status: str = "failed", on_event=None):
    seen: dict[str, list] = {"kept": [], "written": []}

    def run(**kwargs):
        assert kwargs["ident"] and kwargs["quiet"] is True
        for event in recorded:
            if on_event is not None:
                on_event(event)
            if kwargs["event_handler"](event):
                seen["kept"].append(event["event"])
                seen["written"].append(copy.deepcopy(event))  # what ansible-runner writes
        return SimpleNamespace(rc=rc, status=status)

    return run, seen


def test_session_writes_reports_and_keeps_only_some_events(tmp_path, capsys):
    run, seen = fake_runner(events("two_hosts"), rc=2)
    s = session(tmp_path, "two_hosts.yml")
    assert s.execute(runner=run) == ExitCode.FAILED
    assert set(seen["kept"]) <= KEPT_EVENTS
    assert "runner_on_ok" not in seen["kept"]
    latest = tmp_path / "artifacts" / "latest"
    todo = json.loads((latest / "todo.json").read_text())
    assert [t["status"] for t in todo["todos"]] == ["failed", "completed", "cancelled", "completed"]
    assert {"todo.md", "junit.xml"} <= {p.name for p in latest.iterdir()}
    assert "[failed] (high) Prepare alpha" in capsys.readouterr().out


def test_session_strips_no_log_display_and_set_stats_from_written_events(tmp_path):
    recorded = events("secret")
    for event in recorded:
        if event["event"] == "runner_on_failed":
            event["stdout"] = f"[ERROR]: Task failed: Action failed: bad key {SECRET}"
        if event["event"] == "playbook_on_stats":
            event["event_data"]["artifact_data"] = {"todo_details": SECRET}
    run, seen = fake_runner(recorded, rc=2)
    assert session(tmp_path, "secret.yml").execute(runner=run) == ExitCode.FAILED
    written = json.dumps(seen["written"])
    assert SECRET not in written and NO_LOG_NOTE in written


def test_session_cancel_settles_the_checklist(tmp_path):
    s = session(tmp_path, "two_hosts.yml")
    recorded = events("two_hosts")[:8]

    def interrupt(event):
        if event["event"] == "runner_on_ok":
            s.cancel.requested = True  # as the SIGINT handler does

    run, _ = fake_runner(recorded, rc=254, status="canceled", on_event=interrupt)
    assert s.execute(runner=run) == ExitCode.INTERRUPTED
    todo = json.loads((tmp_path / "artifacts" / "latest" / "todo.json").read_text())
    assert {t["status"] for t in todo["todos"]} == {"cancelled"}
    assert todo["run"]["status"] == "interrupted"


def test_a_broken_event_never_stops_the_run(tmp_path):
    recorded = [{"event": "playbook_on_play_start", "event_data": None},
                {"event": "runner_on_ok", "event_data": "garbage"},
                {"event": "runner_on_ok", "event_data": {"host": 5, "res": []}}]
    run, _ = fake_runner(recorded, rc=0, status="successful")
    s = session(tmp_path, "all_ok.yml")
    assert s.execute(runner=run) == ExitCode.OK
    assert s.handler_errors == 1
    assert "1 events could not be read (see the log)" in s.checklist.run.notes


def test_cli_usage_errors_exit_64(capsys):
    with pytest.raises(SystemExit) as exc:
        main(["frobnicate"])
    assert exc.value.code == 64


def test_cli_status_without_runs_says_so(tmp_path, capsys):
    assert main(["status", "--artifacts", str(tmp_path)]) == 1
    assert "no run found" in capsys.readouterr().err


def test_cli_run_with_a_missing_playbook_exits_1(tmp_path, capsys):
    assert main(["run", str(tmp_path / "nope.yml"), "--artifacts", str(tmp_path)]) == 1
    assert "playbook not found" in capsys.readouterr().err


def test_an_ansible_runner_crash_still_leaves_a_checklist(tmp_path, capsys):
    def run(**kwargs):
        raise RuntimeError("pexpect went away")

    assert session(tmp_path, "all_ok.yml").execute(runner=run) == ExitCode.ERROR
    todo = json.loads((tmp_path / "artifacts" / "latest" / "todo.json").read_text())
    assert {t["status"] for t in todo["todos"]} == {"cancelled"}
    assert todo["run"]["notes"] == ["ansible-runner failed: RuntimeError: pexpect went away"]
    assert "pexpect went away" in capsys.readouterr().err
