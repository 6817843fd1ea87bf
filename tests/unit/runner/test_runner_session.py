"""RunSession with a stand-in for ansible_runner.run fed with recorded events."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible_collections.sglang_lxc.serving.runner.checklist import Checklist, ExitCode, RunInfo
from ansible_collections.sglang_lxc.serving.runner.cli import main
from ansible_collections.sglang_lxc.serving.runner.events import ChecklistReducer
from ansible_collections.sglang_lxc.serving.runner.executor import (
    CALLBACK,
    KEPT_EVENTS,
    NO_LOG_NOTE,
    RunOptions,
    RunSession,
    callback_env,
)
from ansible_collections.sglang_lxc.serving.runner.planner import Plan, PlannedPlay
from ansible_collections.sglang_lxc.serving.runner.reports import write_json

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


def fake_runner(recorded: list[dict], rc: int, status: str = "failed", on_event=None,
                plan: Plan | None = None, finished: bool = True):
    """ansible_runner.run fed with recorded events; the todo callback's part (the reducer
    over the same events, todo.json in the job's artifact folder) is done as it would be."""
    seen: dict[str, list] = {"kept": [], "written": []}

    def run(**kwargs):
        assert kwargs["ident"] and kwargs["quiet"] is True
        assert CALLBACK in kwargs["envvars"]["ANSIBLE_CALLBACKS_ENABLED"].split(",")
        run_dir = Path(kwargs["artifact_dir"]) / kwargs["ident"]
        checklist = Checklist(run=RunInfo(id=kwargs["ident"], pid=os.getpid()))
        reducer = ChecklistReducer(checklist, plan)
        for event in recorded:
            if on_event is not None:
                on_event(event)
            reducer.handle(copy.deepcopy(event))
            if kwargs["event_handler"](event):
                seen["kept"].append(event["event"])
                seen["written"].append(copy.deepcopy(event))  # what ansible-runner writes
        if finished:
            reducer.finish(interrupted=False, ansible_rc=rc)
        write_json(checklist, run_dir)
        return SimpleNamespace(rc=rc, status=status)

    return run, seen


def test_session_writes_reports_and_keeps_only_some_events(tmp_path, capsys):
    run, seen = fake_runner(events("two_hosts"), rc=2, plan=two_hosts_plan())
    s = session(tmp_path, "two_hosts.yml")
    assert s.execute(runner=run) == ExitCode.FAILED
    assert set(seen["kept"]) <= KEPT_EVENTS
    assert "runner_on_ok" not in seen["kept"]
    latest = tmp_path / "artifacts" / "latest"
    todo = json.loads((latest / "todo.json").read_text())
    assert [t["status"] for t in todo["todos"]] == ["failed", "completed", "cancelled", "completed"]
    assert {"todo.md", "junit.xml"} <= {p.name for p in latest.iterdir()}
    assert "[failed] (medium) Prepare hosts alpha" in capsys.readouterr().out


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


def two_hosts_plan() -> Plan:
    return Plan(playbook="two_hosts.yml", plays=[
        PlannedPlay(index=i, name=name, pattern="all", hosts=["alpha", "beta"],
                    contents={h: f"{name} {h}" for h in ("alpha", "beta")})
        for i, name in ((1, "Prepare hosts"), (2, "Serve"))])


def test_session_cancel_settles_what_ansible_playbook_left_running(tmp_path):
    s = session(tmp_path, "two_hosts.yml")
    recorded = events("two_hosts")[:8]

    def interrupt(event):
        if event["event"] == "runner_on_ok":
            s.cancel.requested = True  # as the SIGINT handler does

    run, _ = fake_runner(recorded, rc=254, status="canceled", on_event=interrupt,
                         plan=two_hosts_plan(), finished=False)
    assert s.execute(runner=run) == ExitCode.INTERRUPTED
    todo = json.loads((tmp_path / "artifacts" / "latest" / "todo.json").read_text())
    statuses = {t["id"]: (t["status"], t["message"]) for t in todo["todos"]}
    assert statuses["2-alpha"] == ("cancelled", "interrupted before it ran")
    assert all(status != "in_progress" and status != "pending"
               for status, _ in statuses.values())
    assert todo["run"]["status"] == "interrupted"


def test_callback_env_keeps_configured_callbacks_and_adds_todo(tmp_path):
    cfg = tmp_path / "ansible.cfg"
    cfg.write_text("[defaults]\ncallback_plugins = cb:/abs/cb\ncallbacks_enabled = junit, ara\n")
    env = callback_env(str(cfg), {})
    assert env["ANSIBLE_CALLBACK_PLUGINS"].split(":") == [str(tmp_path / "cb"), "/abs/cb"]
    assert env["ANSIBLE_CALLBACKS_ENABLED"] == "junit,ara,sglang_lxc.serving.todo"
    env = callback_env(str(cfg), {"ANSIBLE_CALLBACKS_ENABLED": f"{CALLBACK},profile_tasks"})
    assert env["ANSIBLE_CALLBACKS_ENABLED"] == "sglang_lxc.serving.todo,profile_tasks"
    # the todo callback is found by FQCN (collections_path), not from a folder of ours
    assert "ANSIBLE_CALLBACK_PLUGINS" not in callback_env(None, {})


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
    assert todo["todos"] == [] and todo["run"]["status"] == "error"
    assert todo["run"]["notes"] == ["ansible-runner failed: RuntimeError: pexpect went away"]
    assert "pexpect went away" in capsys.readouterr().err
