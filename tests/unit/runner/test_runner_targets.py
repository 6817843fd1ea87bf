"""set_stats prometheus_targets -> prometheus_targets.json beside todo.json: the reducer, the
reports, the todo callback inside ansible-playbook and `sglang-lxc run` at the end."""

from __future__ import annotations

import json
import os
from pathlib import Path
from types import SimpleNamespace

from ansible_collections.sglang_lxc.serving.plugins.callback.todo import CallbackModule
from ansible_collections.sglang_lxc.serving.runner.checklist import Checklist, ExitCode, RunInfo
from ansible_collections.sglang_lxc.serving.runner.events import ChecklistReducer
from ansible_collections.sglang_lxc.serving.runner.executor import RunOptions, RunSession
from ansible_collections.sglang_lxc.serving.runner.planner import Plan, PlannedPlay
from ansible_collections.sglang_lxc.serving.runner.reports import read_json, write_all, write_json
from ansible_collections.sglang_lxc.serving.runner.targets import TARGETS_JSON, TargetSet

PLAYBOOKS = Path(__file__).resolve().parents[2] / "integration" / "runner" / "playbooks"


def entry(address, host, job="sglang", instance=None, **labels):
    labels = {"job": job, "host": host, **({"sglang_instance": instance} if instance else {}),
              "unit": "sglang-router.service" if job == "sglang-router"
              else f"sglang@{instance}.service", "scope": "loopback", **labels}
    return {"targets": [address], "labels": labels}


def serve(host, *ports):
    return [entry(f"127.0.0.1:{p}", host, instance=f"gpu{p - 30000}", served_model="llama")
            for p in ports]


def router(host):
    return [entry("127.0.0.1:29000", host, job="sglang-router")]


def plan(hosts=("ct200", "ct201")) -> Plan:
    return Plan(playbook="site.yml", plays=[
        PlannedPlay(index=i, name=name, pattern="all", hosts=list(hosts),
                    contents={h: f"{name} on {h}" for h in hosts}, tasks_total=2)
        for i, name in ((1, "Serve"), (2, "Route"))])


def play_start(name):
    return {"event": "playbook_on_play_start",
            "event_data": {"name": name, "play_uuid": f"uuid-{name}"}}


def published(host, value, task="Serve | Publish the instances' Prometheus targets"):
    return {"event": "runner_on_ok", "event_data": {
        "host": host, "task": task, "task_path": f"/r/{task}:1",
        "res": {"changed": False, "ansible_stats": {
            "data": {"prometheus_targets": value}, "aggregate": True, "per_host": False}}}}


def assert_file_sd(path: Path) -> list:
    data = json.loads(path.read_text())
    assert isinstance(data, list)
    for item in data:
        assert set(item) == {"targets", "labels"}
        assert all(isinstance(t, str) for t in item["targets"])
        assert all(isinstance(v, str) for v in item["labels"].values())
    return data


def test_reports_of_several_hosts_and_roles_merge_sorted():
    checklist = Checklist()
    reducer = ChecklistReducer(checklist, plan())
    reducer.handle(play_start("Serve"))
    reducer.handle(published("ct201", {"ct201": serve("ct201", 30000)}))
    reducer.handle(published("ct200", {"ct200": list(reversed(serve("ct200", 30000, 30001)))}))
    reducer.handle(play_start("Route"))
    reducer.handle(published("ct200", {"ct200": router("ct200")}, task="Router | Publish"))
    entries = checklist.targets.entries()
    assert [(e["labels"]["host"], e["labels"]["job"], e["targets"][0]) for e in entries] == [
        ("ct200", "sglang", "127.0.0.1:30000"),
        ("ct200", "sglang", "127.0.0.1:30001"),
        ("ct200", "sglang-router", "127.0.0.1:29000"),
        ("ct201", "sglang", "127.0.0.1:30000"),
    ]
    # nothing of it on the items, nor in todo.json
    assert all(i.details == "" for i in checklist.items)
    assert "prometheus_targets" not in json.dumps(checklist.to_dict())


def test_a_second_report_replaces_the_host_s_entries_of_that_job():
    targets = TargetSet()
    assert targets.update({"ct200": serve("ct200", 30000, 30001) + router("ct200")}, "ct200")
    version = targets.version
    assert not targets.update({"ct200": serve("ct200", 30000, 30001)}, "ct200")  # the same
    assert targets.version == version
    assert targets.update({"ct200": serve("ct200", 30001)}, "ct200")  # gpu0's metrics went off
    assert [e["targets"][0] for e in targets.entries()] == ["127.0.0.1:30001", "127.0.0.1:29000"]
    # a plain list is for the host the task ran on; label values become strings
    targets.update([{"targets": ["10.0.3.201:30000"], "labels": {"job": "sglang", "port": 30000,
                                                                 "bad-name": "x", "empty": ""}}],
                   "ct201")
    last = targets.entries()[-1]
    assert last["labels"] == {"job": "sglang", "port": "30000", "host": "ct201"}


def test_an_empty_report_writes_an_empty_list_and_junk_is_left_out_with_a_note(tmp_path):
    checklist = Checklist()
    reducer = ChecklistReducer(checklist, plan(("ct200",)))
    reducer.handle(play_start("Serve"))
    reducer.handle(published("ct200", {"ct200": []}))
    write_all(checklist, tmp_path)
    assert assert_file_sd(tmp_path / TARGETS_JSON) == []
    reducer.handle(published("ct200", {"ct200": ["nope", {"labels": {}}]}))
    reducer.finish(interrupted=False, ansible_rc=0)
    assert checklist.run.notes == [
        "prometheus_targets: 2 entries were not {targets, labels} and were left out"]


def test_no_report_no_file(tmp_path):
    paths = write_all(Checklist(), tmp_path)
    assert not (tmp_path / TARGETS_JSON).exists()
    assert TARGETS_JSON not in {p.name for p in paths}


def test_the_callback_writes_the_file_at_once_and_lists_it_at_the_end(tmp_path):
    callback = CallbackModule()
    callback.run_dir = tmp_path
    callback.checklist.run = RunInfo(id="r1", playbook="site.yml", artifact_dir=str(tmp_path))
    callback.reducer.load_plan(plan(("ct200",)))
    callback._feed("playbook_on_play_start", play_start("Serve")["event_data"])
    callback._feed("runner_on_ok", published("ct200", {"ct200": serve("ct200", 30001, 30000)})[
        "event_data"])
    written = assert_file_sd(tmp_path / TARGETS_JSON)  # before the run ends
    assert [e["targets"] for e in written] == [["127.0.0.1:30000"], ["127.0.0.1:30001"]]
    assert not list(tmp_path.glob(".*.tmp"))  # written aside, then renamed
    callback._feed("playbook_on_play_start", play_start("Route")["event_data"])
    callback._feed("runner_on_ok", published("ct200", {"ct200": router("ct200")}, "R")[
        "event_data"])
    callback.v2_playbook_on_stats(SimpleNamespace(failures={}, dark={}))
    assert callback._errors == 0
    data = assert_file_sd(tmp_path / TARGETS_JSON)
    assert [e["labels"]["job"] for e in data] == ["sglang", "sglang", "sglang-router"]
    assert read_json(tmp_path / "todo.json").run.status == "successful"


def test_sglang_lxc_run_prints_the_file_with_the_other_artifacts(tmp_path, capsys):
    def run(**kwargs):
        run_dir = Path(kwargs["artifact_dir"]) / kwargs["ident"]
        checklist = Checklist(run=RunInfo(id=kwargs["ident"], pid=os.getpid()))
        reducer = ChecklistReducer(checklist, plan(("ct200",)))
        for event in (play_start("Serve"), published("ct200", {"ct200": serve("ct200", 30000)})):
            reducer.handle(event)
        reducer.finish(interrupted=False, ansible_rc=0)
        write_all(checklist, run_dir)  # as the callback does at the end
        return SimpleNamespace(rc=0, status="successful")

    options = RunOptions(playbook=str(PLAYBOOKS / "all_ok.yml"),
                         inventories=[str(PLAYBOOKS / "inventory.yml")],
                         artifacts=str(tmp_path / "artifacts"), view="plain")
    assert RunSession(options).execute(runner=run) == ExitCode.OK
    latest = tmp_path / "artifacts" / "latest"
    assert assert_file_sd(latest / TARGETS_JSON)[0]["targets"] == ["127.0.0.1:30000"]
    out = capsys.readouterr().out
    assert f"{latest.resolve() / TARGETS_JSON}" in out
    assert out.index("todo.json") < out.index(TARGETS_JSON)


def test_without_targets_sglang_lxc_run_lists_no_such_file(tmp_path, capsys):
    def run(**kwargs):
        write_json(Checklist(run=RunInfo(id=kwargs["ident"], exit_code=0, status="successful")),
                   Path(kwargs["artifact_dir"]) / kwargs["ident"])
        return SimpleNamespace(rc=0, status="successful")

    options = RunOptions(playbook=str(PLAYBOOKS / "all_ok.yml"),
                         inventories=[str(PLAYBOOKS / "inventory.yml")],
                         artifacts=str(tmp_path / "artifacts"), view="plain")
    RunSession(options).execute(runner=run)
    assert TARGETS_JSON not in capsys.readouterr().out
