"""ChecklistReducer on recorded and hand-made ansible-runner events."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.sglang_lxc.serving.runner.checklist import Checklist, ExitCode, Status
from ansible_collections.sglang_lxc.serving.runner.events import ChecklistReducer, failure_message
from ansible_collections.sglang_lxc.serving.runner.planner import Plan, PlannedPlay
from ansible_collections.sglang_lxc.serving.runner.reports import item_note

RECORDINGS = Path(__file__).parent / "recordings"


def recorded(name: str) -> list[dict]:
    return json.loads((RECORDINGS / f"{name}.json").read_text())


def make_plan(*plays: tuple[str, list[str]], **extra) -> Plan:
    plan = Plan(playbook="test.yml", **extra)
    for index, (name, hosts) in enumerate(plays, start=1):
        plan.plays.append(
            PlannedPlay(
                index=index,
                name=name,
                pattern=",".join(hosts),
                hosts=list(hosts),
                priority="high" if index == 1 else "medium",
                contents={h: f"{name} on {h}" for h in hosts},
                tasks_total=3,
            )
        )
    return plan


def replay(plan: Plan, events: list[dict], **finish) -> tuple[Checklist, ExitCode, list]:
    checklist = Checklist()
    changes: list[tuple[str, Status, Status]] = []
    reducer = ChecklistReducer(
        checklist, plan, on_change=lambda item, old: changes.append((item.id, old, item.status))
    )
    for event in events:
        reducer.handle(event)
    code = reducer.finish(interrupted=finish.get("interrupted", False),
                          ansible_rc=finish.get("ansible_rc", 0))
    return checklist, code, changes


def by_id(checklist: Checklist) -> dict:
    return {i.id: i for i in checklist.items}


# -- hand-made events -------------------------------------------------------------------------
def play_start(name: str, uuid: str | None = None) -> dict:
    return {"event": "playbook_on_play_start",
            "event_data": {"name": name, "play": name, "play_uuid": uuid or f"uuid-{name}"}}


def on(kind: str, host: str, task: str = "t", **data) -> dict:
    return {"event": f"runner_on_{kind}", "event_data": {"host": host, "task": task, **data}}


def stats(**data) -> dict:
    return {"event": "playbook_on_stats", "event_data": data}


def test_plan_lists_every_item_pending_before_any_event():
    checklist = Checklist()
    ChecklistReducer(checklist, make_plan(("Install", ["a", "b"]), ("Serve", ["a"])))
    assert [(i.id, i.status, i.priority) for i in checklist.items] == [
        ("1-a", Status.PENDING, "high"),
        ("1-b", Status.PENDING, "high"),
        ("2-a", Status.PENDING, "medium"),
    ]


def test_recorded_two_hosts_one_fails_other_completes_after_rescue():
    plan = make_plan(("Prepare hosts", ["alpha", "beta"]), ("Serve", ["alpha", "beta"]))
    checklist, code, _ = replay(plan, recorded("two_hosts"), ansible_rc=2)
    items = by_id(checklist)
    assert code is ExitCode.FAILED
    assert items["1-alpha"].status is Status.FAILED
    assert items["1-alpha"].task == "Prepare | Fail on alpha only"
    assert items["1-alpha"].message == "disk full on alpha"
    assert items["1-beta"].status is Status.COMPLETED
    assert "recovered after 'Prepare | Flaky step' failed: flaky" in items["1-beta"].message
    assert items["2-alpha"].status is Status.CANCELLED
    assert items["2-alpha"].message == "not run: alpha failed earlier (Prepare hosts on alpha)"
    assert items["2-beta"].status is Status.COMPLETED
    assert checklist.run.status == "failed"


def test_recorded_unreachable_host():
    plan = make_plan(("Probe hosts", ["alpha", "ghost"]))
    checklist, code, _ = replay(plan, recorded("unreachable"), ansible_rc=4)
    items = by_id(checklist)
    assert code is ExitCode.UNREACHABLE
    assert items["1-alpha"].status is Status.COMPLETED
    ghost = items["1-ghost"]
    assert ghost.status is Status.FAILED and ghost.unreachable
    assert ghost.message.startswith("unreachable: ")
    assert "127.0.0.2" in ghost.message


def test_unreachable_after_a_reboot_says_what_cut_the_connection():
    """Issue 21: a container rebooted mid-task. ansible's ssh plugin ends its message with ssh's
    stderr, empty when the connection was cut, so it stopped at "...over ssh:". The checklist
    (and todo.json, the same item) says what that means."""
    plan = make_plan(("Install the stack", ["ct285"]))
    said = ('Task failed: Data could not be sent to remote host "10.0.3.185". Make sure this host '
            "can be reached over ssh: ")
    events = [play_start("Install the stack"),
              on("unreachable", "ct285", res={"msg": said, "unreachable": True, "changed": False})]
    checklist, code, _ = replay(plan, events, ansible_rc=4)
    item = by_id(checklist)["1-ct285"]
    assert code is ExitCode.UNREACHABLE and item.unreachable
    assert item.message.startswith("unreachable: Task failed: Data could not be sent")
    assert not item.message.rstrip().endswith(":")
    assert "over ssh: ssh printed no error (exit 255): the connection was cut mid-task" in (
        item.message)
    # a message with ssh's own words keeps them and gains nothing
    events[1]["event_data"]["res"]["msg"] = said + "ssh: connect to host 10.0.3.185: No route"
    item = by_id(replay(plan, events, ansible_rc=4)[0])["1-ct285"]
    assert item.message.endswith("over ssh: ssh: connect to host 10.0.3.185: No route")


def test_recorded_skips_with_condition_and_with_declared_reason():
    plan = make_plan(("Launch instances", ["alpha"]), ("Build sgl-kernel", ["alpha"]),
                     conditions={"skipped.yml:9": ["gpu_count | int > 0"]})
    checklist, code, _ = replay(plan, recorded("skipped"))
    items = by_id(checklist)
    assert code is ExitCode.OK
    assert items["1-alpha"].status is Status.SKIPPED
    assert items["1-alpha"].message == "skipped: gpu_count <= 0"
    assert items["2-alpha"].status is Status.SKIPPED
    assert items["2-alpha"].message == "no GPU"


def test_recorded_no_log_results_stay_censored():
    plan = make_plan(("Configure the API key", ["alpha"]))
    checklist, code, _ = replay(plan, recorded("secret"), ansible_rc=2)
    item = by_id(checklist)["1-alpha"]
    assert code is ExitCode.FAILED
    assert item.status is Status.FAILED
    assert item.message == "output hidden (no_log)"
    assert item.details == ""  # set_stats under no_log is censored: nothing to show
    assert "TOPSECRET" not in json.dumps(checklist.to_dict())


def test_in_progress_counts_tasks_and_shows_the_current_one():
    checklist = Checklist()
    reducer = ChecklistReducer(checklist, make_plan(("Install", ["a"])))
    reducer.handle(play_start("Install"))
    reducer.handle(on("start", "a", "Install | one"))
    reducer.handle(on("ok", "a", "Install | one", res={}))
    reducer.handle(on("start", "a", "Install | two"))
    item = checklist.items[0]
    assert item.status is Status.IN_PROGRESS
    assert item.task == "Install | two"
    assert (item.tasks_done, item.progress) == (1, "1/3 tasks")
    assert item.started is not None


def test_details_from_set_stats_string_mapping_list_and_loop():
    checklist = Checklist()
    reducer = ChecklistReducer(checklist, make_plan(("Serve", ["a", "b"])))
    reducer.handle(play_start("Serve"))
    stat = {"ansible_stats": {"data": {"todo_details": "8/8 healthy"}}}
    reducer.handle(on("ok", "a", res=stat))
    run_once = {"ansible_stats": {"data": {"todo_details": {"a": "port 30000", "b": ["x", "y"]}}}}
    reducer.handle(on("ok", "a", res=run_once))
    looped = {"results": [{"ansible_stats": {"data": {"todo_details": "MAX_JOBS=20"}}}]}
    reducer.handle(on("ok", "b", res=looped))
    items = by_id(checklist)
    assert items["1-a"].details == "8/8 healthy; port 30000"
    assert items["1-b"].details == "x; y; MAX_JOBS=20"


def test_progress_reports_replace_each_other_as_fields():
    """todo_progress (the readiness rounds): the latest report is the item's activity, as fields
    in todo.json and as text on the live line; it never piles up like todo_details."""
    checklist = Checklist()
    reducer = ChecklistReducer(checklist, make_plan(("Serve", ["a", "b"])))
    reducer.handle(play_start("Serve"))
    reducer.handle(on("start", "a", "Readiness | Poll instances (round 1)"))
    for percent in (12, 43):
        text = f"0/1 healthy; gpu0 loading {percent}% (235/547 GB, 1.9 GB/s, ETA 2m40s)"
        report = {"a": {"text": text, "instances": [{"name": "gpu0", "percent": percent}]}}
        reducer.handle(on("ok", "a", res={"ansible_stats": {"data": {"todo_progress": report}}}))
    item = by_id(checklist)["1-a"]
    assert item.activity["instances"] == [{"name": "gpu0", "percent": 43}]
    assert item.details == ""
    assert checklist.to_dict()["todos"][0]["activity"]["instances"][0]["percent"] == 43
    note = item_note(item)
    assert note.startswith("0/1 healthy; gpu0 loading 43% (235/547 GB, 1.9 GB/s, ETA 2m40s) — ")
    assert "Readiness | Poll instances" in note
    # a plain string for the host the task ran on
    reducer.handle(on("ok", "b", res={"ansible_stats": {"data": {"todo_progress": "warming"}}}))
    assert by_id(checklist)["1-b"].activity == {"text": "warming"}
    # read back from todo.json
    again = Checklist.from_dict(checklist.to_dict())
    assert again.items[0].activity == item.activity


def test_ignored_errors_do_not_fail_the_item():
    plan = make_plan(("Install", ["a"]))
    events = [play_start("Install"), on("start", "a"),
              on("failed", "a", ignore_errors=True, res={"msg": "meh"}), stats()]
    checklist, code, _ = replay(plan, events)
    assert code is ExitCode.OK
    assert checklist.items[0].status is Status.COMPLETED


def test_failure_is_undone_when_stats_count_no_failure():
    # a rescued failure in the last play: the host never shows up in a later play
    plan = make_plan(("Install", ["a"]))
    events = [play_start("Install"), on("start", "a", "flaky"),
              on("failed", "a", "flaky", res={"msg": "boom"}), on("start", "a", "rescue"),
              on("ok", "a", "rescue", res={}), stats(failures={}, rescued={"a": 1})]
    checklist, code, _ = replay(plan, events)
    assert code is ExitCode.OK
    assert checklist.items[0].status is Status.COMPLETED
    assert checklist.items[0].message.startswith("recovered after 'flaky' failed: boom")


def test_hosts_added_during_the_run_get_items_when_they_show_up():
    plan = make_plan(("Create", ["node"]), ("Configure", []))
    events = [play_start("Create"), on("start", "node"), on("ok", "node", res={}),
              play_start("Configure"), on("start", "ct200"), on("ok", "ct200", res={}), stats()]
    checklist, code, _ = replay(plan, events)
    items = by_id(checklist)
    assert code is ExitCode.OK
    assert items["2-ct200"].status is Status.COMPLETED
    assert items["2-ct200"].content == "Configure on ct200"


def test_a_play_missing_from_the_plan_is_added():
    plan = Plan(playbook="x.yml")  # the planner failed
    events = [play_start("Surprise"), on("start", "a"), on("ok", "a", res={}), stats()]
    checklist, code, _ = replay(plan, events)
    assert code is ExitCode.OK
    assert [(i.id, i.content, i.status) for i in checklist.items] == [
        ("1-a", "Surprise on a", Status.COMPLETED)]


def test_an_unplanned_play_does_not_hide_the_planned_ones_after_it():
    plan = make_plan(("A", ["h"]), ("B", ["h"]))
    events = [play_start("A"), on("start", "h"), on("ok", "h", res={}),
              play_start("Surprise"), on("start", "h"), on("ok", "h", res={}),
              play_start("B"), on("start", "h"), on("ok", "h", res={}), stats()]
    checklist, code, _ = replay(plan, events)
    assert code is ExitCode.OK
    assert [(i.id, i.status) for i in checklist.items] == [
        ("1-h", Status.COMPLETED), ("2-h", Status.COMPLETED), ("3-h", Status.COMPLETED)]
    assert checklist.items[2].content == "Surprise on h"


def test_serial_batches_settle_each_batch_and_the_play_keeps_its_index():
    plan = make_plan(("Rolling restart", ["a", "b"]), ("After", ["a"]))
    events = [play_start("Rolling restart", "u1"), on("start", "a"), on("ok", "a", res={}),
              play_start("Rolling restart", "u1_1"), on("start", "b")]
    checklist = Checklist()
    reducer = ChecklistReducer(checklist, plan)
    for event in events:
        reducer.handle(event)
    items = by_id(checklist)
    assert items["1-a"].status is Status.COMPLETED
    assert items["1-b"].status is Status.IN_PROGRESS
    assert items["2-a"].status is Status.PENDING


def test_interrupt_cancels_everything_unfinished():
    plan = make_plan(("Quick", ["a"]), ("Long", ["a"]), ("After", ["a"]))
    events = [play_start("Quick"), on("start", "a"), on("ok", "a", res={}),
              play_start("Long"), on("start", "a", "Build | Sleep")]
    checklist, code, _ = replay(plan, events, interrupted=True, ansible_rc=254)
    items = by_id(checklist)
    assert code is ExitCode.INTERRUPTED
    assert checklist.run.status == "interrupted"
    assert items["1-a"].status is Status.COMPLETED
    assert items["2-a"].status is Status.CANCELLED
    assert items["2-a"].message == "interrupted during 'Build | Sleep'"
    assert items["3-a"].status is Status.CANCELLED
    assert items["3-a"].message == "interrupted before it ran"


def test_ansible_error_before_any_task_cancels_all_and_exits_1():
    checklist, code, _ = replay(make_plan(("Install", ["a"])), [], ansible_rc=4 + 1)
    assert code is ExitCode.ERROR
    assert checklist.items[0].status is Status.CANCELLED
    assert "ansible-playbook stopped (rc=5)" in checklist.items[0].message


def test_play_without_results_for_a_host_is_skipped():
    plan = make_plan(("Once", ["a", "b"]))
    events = [play_start("Once"), on("start", "a"), on("ok", "a", res={}), stats()]
    checklist, _, _ = replay(plan, events)
    items = by_id(checklist)
    assert items["1-b"].status is Status.SKIPPED
    assert items["1-b"].message == "no task ran on this host"


def test_changes_are_reported_once_per_transition():
    plan = make_plan(("Install", ["a"]))
    events = [play_start("Install"), on("start", "a"), on("ok", "a", res={}), stats()]
    _, _, changes = replay(plan, events)
    transitions = [(old, new) for _, old, new in changes if old is not new]
    assert transitions == [(Status.PENDING, Status.IN_PROGRESS),
                           (Status.IN_PROGRESS, Status.COMPLETED)]


@pytest.mark.parametrize(
    ("res", "expected"),
    [
        ({"msg": "disk full"}, "disk full"),
        ({"censored": "the output has been hidden"}, "output hidden (no_log)"),
        ({"msg": "non-zero return code", "stderr": "a\nno permission", "rc": 3},
         "non-zero return code: no permission"),
        ({"results": [{"failed": False}, {"failed": True, "msg": "item 2 broke"}]},
         "item 2 broke"),
        ({"rc": 7}, "rc=7"),
        (None, ""),
    ],
)
def test_failure_message(res, expected):
    assert failure_message(res) == expected


def test_failure_message_is_clipped_and_plain():
    message = failure_message({"msg": "\x1b[0;31m" + "x" * 1000})
    assert len(message) == 400 and message.endswith("…") and "\x1b" not in message
