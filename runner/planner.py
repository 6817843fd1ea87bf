"""List the run's milestones (plays x hosts) before the first task runs.

Ansible reads the playbook and inventory itself, exactly as ``ansible-playbook --list-hosts``
does with the same options (``--limit``, ``-e``, ``--tags``...), in this process. The result is
a ``Plan``: per play its name, its hosts, ``todo_priority``, ``todo_content`` rendered per host,
and a static task count. Plays that target hosts created later with ``add_host`` get their items
when those hosts first show up in the run (``Plan.content_for``).
"""

from __future__ import annotations

import logging
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .checklist import DEFAULT_PRIORITY, Priority

log = logging.getLogger(__name__)

# options that would make ansible prompt (the planner never prompts) or that only matter for running
_DROP_FLAGS = {"--ask-vault-pass", "--ask-vault-password", "-J", "-k", "--ask-pass", "-K",
               "--ask-become-pass", "--step", "--check", "-C", "--diff", "-D",
               "--syntax-check", "--list-hosts", "--list-tasks", "--list-tags"}
_DROP_WITH_VALUE = {"--start-at-task"}


@dataclass
class PlannedPlay:
    index: int  # 1-based, in run order
    name: str
    pattern: str
    hosts: list[str]
    priority: str = DEFAULT_PRIORITY.value
    contents: dict[str, str] = field(default_factory=dict)  # host -> rendered todo_content
    content_template: str | None = None
    tasks_total: int | None = None


@dataclass
class Plan:
    playbook: str
    plays: list[PlannedPlay] = field(default_factory=list)
    # "file:line" of each task -> its `when` conditions, for skip reasons
    conditions: dict[str, list[str]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    _render: Any = field(default=None, repr=False)

    def content_for(self, play: PlannedPlay, host: str) -> str:
        """The todo title of ``play`` on ``host`` (also for hosts added during the run)."""
        if host in play.contents:
            return play.contents[host]
        if play.content_template and self._render is not None:
            try:
                rendered = self._render(play, host)
            except Exception as exc:  # a title must never break the run
                log.debug("todo_content of %s on %s: %s", play.name, host, exc)
            else:
                if rendered:
                    play.contents[host] = rendered
                    return rendered
        return default_content(play.name, play.pattern, host)


def default_content(play_name: str, pattern: str, host: str) -> str:
    return f"{play_name or pattern} on {host}"


def normalise_priority(value: Any, where: str, notes: list[str]) -> str:
    if value is None:
        return DEFAULT_PRIORITY.value
    text = str(value).strip().lower()
    if text in {p.value for p in Priority}:
        return text
    notes.append(f"{where}: todo_priority {value!r} is not high, medium or low; using medium")
    return DEFAULT_PRIORITY.value


def planner_args(extra_args: Sequence[str]) -> list[str]:
    """ansible-playbook options that matter for listing plays and hosts (no prompts)."""
    kept: list[str] = []
    skip_next = False
    for arg in extra_args:
        if skip_next:
            skip_next = False
            continue
        if arg in _DROP_FLAGS:
            continue
        if arg in _DROP_WITH_VALUE:
            skip_next = True
            continue
        if any(arg.startswith(f"{flag}=") for flag in _DROP_WITH_VALUE):
            continue
        kept.append(arg)
    return kept


def plan_playbook(playbook: str, inventories: Sequence[str], extra_args: Sequence[str]) -> Plan:
    """Read ``playbook`` with ansible's own loaders; raise ansible's error if it cannot."""
    # imported here: ansible reads its configuration (ANSIBLE_CONFIG) when first imported
    from ansible import constants as C
    from ansible import context
    from ansible.cli import CLI
    from ansible.cli.playbook import PlaybookCLI
    from ansible.executor.playbook_executor import PlaybookExecutor
    from ansible.playbook.block import Block
    from ansible.template import Templar

    argv = ["ansible-playbook", "--list-hosts"]
    for inv in inventories:
        argv += ["-i", inv]
    argv += [*planner_args(extra_args), playbook]
    cli = PlaybookCLI(argv)
    CLI.run(cli)  # parse options into context.CLIARGS and set up the plugin loader
    loader, inventory, variable_manager = cli._play_prereqs()
    inventory.subset(context.CLIARGS["subset"])
    executor = PlaybookExecutor(
        playbooks=context.CLIARGS["args"],
        inventory=inventory,
        variable_manager=variable_manager,
        loader=loader,
        passwords={},
    )
    listing = executor.run()

    plan = Plan(playbook=playbook)

    def tasks_of(block: Block, out: list[Any]) -> None:
        for task in block.block + block.rescue + block.always:
            if isinstance(task, Block):
                tasks_of(task, out)
            elif not (task.action in C._ACTION_META and task.implicit):
                out.append(task)

    def render(play: PlannedPlay, host: str) -> str:
        ansible_play = plays_by_index[play.index]
        host_obj = inventory.get_host(host)
        if host_obj is not None:
            variables = variable_manager.get_vars(play=ansible_play, host=host_obj)
        else:  # a host from add_host: play and extra vars only
            variables = variable_manager.get_vars(play=ansible_play)
            variables = {**variables, "inventory_hostname": host,
                         "inventory_hostname_short": host.split(".")[0]}
        source = ansible_play.vars.get("todo_content")
        return str(Templar(loader=loader, variables=variables).template(source)).strip()

    plays_by_index: dict[int, Any] = {}
    index = 0
    for entry in listing:
        for play in entry["plays"]:
            index += 1
            plays_by_index[index] = play
            loader.set_basedir(play._included_path or os.path.dirname(entry["playbook"]))
            hosts = [h.name for h in inventory.get_hosts(play.hosts)]
            pattern = ",".join(play.hosts) if isinstance(play.hosts, list) else str(play.hosts)
            name = play.get_name().strip() or pattern
            planned = PlannedPlay(
                index=index,
                name=name,
                pattern=pattern,
                hosts=hosts,
                priority=normalise_priority(play.vars.get("todo_priority"), name, plan.notes),
                content_template=play.vars.get("todo_content"),
            )
            try:
                all_vars = variable_manager.get_vars(play=play)
                tasks: list[Any] = []
                for block in play.compile():
                    tasks_of(block.filter_tagged_tasks(all_vars), tasks)
                planned.tasks_total = len(tasks)
                for task in tasks:
                    if task.when:
                        plan.conditions[task.get_path()] = [str(w) for w in task.when]
            except Exception as exc:  # the count is a nicety
                log.debug("counting tasks of %s: %s", name, exc)
            plan.plays.append(planned)

    plan._render = render
    for planned in plan.plays:
        for host in planned.hosts:
            planned.contents[host] = plan.content_for(planned, host)
    return plan
