"""The planner reads plays x hosts with ansible's own loaders (in this process)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from ansible_collections.sglang_lxc.serving.runner.errors import RunError
from ansible_collections.sglang_lxc.serving.runner.planner import (
    Plan,
    normalise_priority,
    plan_in_subprocess,
    planner_args,
)

PLAYBOOKS = Path(__file__).resolve().parents[2] / "integration" / "runner" / "playbooks"
INVENTORY = str(PLAYBOOKS / "inventory.yml")


def test_planner_args_drop_prompts_and_run_only_options():
    args = ["--ask-vault-pass", "-K", "--check", "-l", "beta", "--start-at-task", "X",
            "--start-at-task=Y", "-e", "a=1", "--diff", "-t", "cuda"]
    assert planner_args(args) == ["-l", "beta", "-e", "a=1", "-t", "cuda"]


def test_priority_is_normalised_with_a_note():
    notes: list[str] = []
    assert normalise_priority("HIGH", "p", notes) == "high"
    assert normalise_priority(None, "p", notes) == "medium"
    assert normalise_priority("urgent", "Install", notes) == "medium"
    assert notes == ["Install: todo_priority 'urgent' is not high, medium or low; using medium"]


def test_plan_renders_titles_per_host_and_counts_tasks():
    plan = plan_in_subprocess(str(PLAYBOOKS / "all_ok.yml"), [INVENTORY], [])
    assert [(p.index, p.name, p.hosts, p.priority) for p in plan.plays] == [
        (1, "Check the toolchain", ["alpha"], "high"),
        (2, "Launch instances", ["alpha"], "medium"),
        (3, "Plain play without todo vars", ["alpha"], "medium"),
    ]
    assert plan.plays[0].contents == {"alpha": "Install CUDA 13 toolchain on alpha"}
    assert plan.plays[2].contents == {"alpha": "Plain play without todo vars on alpha"}
    assert [p.tasks_total for p in plan.plays] == [2, 2, 1]


def test_plan_honours_limit_and_keeps_conditions_for_skip_reasons():
    plan = plan_in_subprocess(str(PLAYBOOKS / "two_hosts.yml"), [INVENTORY], ["--limit", "beta"])
    assert [p.hosts for p in plan.plays] == [["beta"], ["beta"]]
    assert plan.plays[0].contents == {"beta": "Prepare beta"}
    assert ["inventory_hostname == 'alpha'"] in plan.conditions.values()


def test_plan_renders_titles_for_hosts_added_later():
    plan = plan_in_subprocess(str(PLAYBOOKS / "skipped.yml"), [INVENTORY], [])
    assert plan.content_for(plan.plays[1], "ct200") == "Build sgl-kernel on ct200"


def test_plan_errors_carry_ansible_message():
    with pytest.raises(RunError, match=r"missing\.yml"):
        plan_in_subprocess(str(PLAYBOOKS / "missing.yml"), [INVENTORY], [])


def test_plan_round_trips_through_json():
    plan = plan_in_subprocess(str(PLAYBOOKS / "all_ok.yml"), [INVENTORY], [])
    assert Plan.from_dict(json.loads(json.dumps(plan.to_dict()))).to_dict() == plan.to_dict()


def test_a_play_of_run_once_tasks_is_one_milestone():
    plan = plan_in_subprocess(str(PLAYBOOKS / "run_once.yml"), [INVENTORY], [])
    assert [(p.name, p.hosts) for p in plan.plays] == [
        ("Validate once", ["alpha"]),
        ("Mixed", ["alpha", "beta"]),
    ]
