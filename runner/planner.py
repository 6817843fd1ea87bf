"""List the run's milestones (plays x hosts) before the first task runs.

``plan_plays`` reads plays ansible has loaded: the todo callback calls it at playbook start
with ansible-playbook's own plays, inventory (``--limit`` applied), variables (``-e``) and
``--tags``, so nothing is parsed twice. ``plan_playbook`` loads a playbook as
``ansible-playbook --list-hosts`` does, for
``python -m ansible_collections.sglang_lxc.serving.runner.planner PLAYBOOK -i INV``
(a child process: ansible keeps process-wide state that can be set up only once).
The result is a ``Plan``: per play its name, its hosts, ``todo_priority``, ``todo_content``
rendered per host, and its tasks (file:line, after ``--tags``). Plays that target hosts
created later with ``add_host`` get their items when those hosts first show up in the run
(``Plan.content_for``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from .checklist import DEFAULT_PRIORITY, Priority
from .errors import RunError

log = logging.getLogger(__name__)

# options that would make ansible prompt (the planner never prompts) or that only matter for running
_DROP_FLAGS = {"--ask-vault-pass", "--ask-vault-password", "-J", "-k", "--ask-pass", "-K",
               "--ask-become-pass", "--step", "--check", "-C", "--diff", "-D",
               "--syntax-check", "--list-hosts", "--list-tasks", "--list-tags"}
_DROP_WITH_VALUE = {"--start-at-task"}
PLAN_MARKER = "SGLANG_LXC_PLAN "


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
    task_paths: list[str] = field(default_factory=list)  # file:line of each task, for counts
    simple_vars: dict[str, Any] = field(default_factory=dict)  # for hosts added later


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
        if play.content_template:
            render = self._render or _render_late
            try:
                rendered = render(play, host)
            except Exception as exc:  # a title must never break the run
                log.debug("todo_content of %s on %s: %s", play.name, host, exc)
                note = f"{play.name}: todo_content could not be rendered ({exc}); using the name"
                note = " ".join(note.split())[:300]
                if note not in self.notes:
                    self.notes.append(note)
            else:
                if rendered:
                    play.contents[host] = rendered
                    return rendered
        return default_content(play.name, play.pattern, host)

    def to_dict(self) -> dict[str, Any]:
        return {
            "playbook": self.playbook,
            "plays": [asdict(p) for p in self.plays],
            "conditions": self.conditions,
            "notes": self.notes,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        return cls(
            playbook=data["playbook"],
            plays=[PlannedPlay(**p) for p in data.get("plays", [])],
            conditions=dict(data.get("conditions", {})),
            notes=list(data.get("notes", [])),
        )


def _render_late(play: PlannedPlay, host: str) -> str:
    """todo_content for a host ansible did not know at planning time (added with add_host).

    Rendered with plain Jinja2 (sandboxed) from the play's simple variables and the host name;
    anything undefined falls back to the default title.
    """
    from jinja2 import StrictUndefined
    from jinja2.sandbox import SandboxedEnvironment

    env = SandboxedEnvironment(undefined=StrictUndefined)
    variables = {**play.simple_vars, "inventory_hostname": host,
                 "inventory_hostname_short": host.split(".")[0]}
    return env.from_string(str(play.content_template)).render(**variables).strip()


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
    from ansible import context
    from ansible.cli import CLI
    from ansible.cli.playbook import PlaybookCLI
    from ansible.executor.playbook_executor import PlaybookExecutor

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

    plays = [play for entry in listing for play in entry["plays"]]
    return plan_plays(playbook, plays, inventory, variable_manager, loader)


def plan_plays(
    playbook: str,
    plays: Sequence[Any],
    inventory: Any,
    variable_manager: Any,
    loader: Any,
    first_index: int = 1,
    template_hosts: bool = False,
) -> Plan:
    """The plan of ansible's loaded ``plays`` (the todo callback calls this at playbook start).

    ``template_hosts``: the plays' ``hosts`` are still templates (before ansible's own
    post-validation at play start), render them with the play's variables.
    """
    from ansible import constants as C
    from ansible.playbook.block import Block
    from ansible.template import Templar

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
    for index, play in enumerate(plays, start=first_index):
        plays_by_index[index] = play
        if play._included_path:
            loader.set_basedir(play._included_path)
        patterns = play.hosts
        all_vars: dict[str, Any] | None = None
        if template_hosts:
            try:
                all_vars = variable_manager.get_vars(play=play)
                patterns = Templar(loader=loader, variables=all_vars).template(play.hosts)
            except Exception as exc:  # ansible says why at play start
                log.debug("hosts of %s: %s", play.get_name(), exc)
                patterns = []
        hosts = [h.name for h in inventory.get_hosts(patterns)] if patterns else []
        pattern = ",".join(map(str, play.hosts)) if isinstance(play.hosts, list) else str(
            play.hosts)
        name = play.get_name().strip() or pattern
        planned = PlannedPlay(
            index=index,
            name=name,
            pattern=pattern,
            hosts=hosts,
            priority=normalise_priority(play.vars.get("todo_priority"), name, plan.notes),
            content_template=_plain(play.vars.get("todo_content")),
        )
        if planned.content_template:  # only what the title uses
            planned.simple_vars = {
                k: _plain(v) for k, v in play.vars.items()
                if k != "todo_content" and isinstance(v, str | int | float | bool)
                and k in str(planned.content_template)
            }
        try:
            if all_vars is None:
                all_vars = variable_manager.get_vars(play=play)
            tasks: list[Any] = []
            for block in play.compile():
                tasks_of(block.filter_tagged_tasks(all_vars), tasks)
            planned.task_paths = list(dict.fromkeys(t.get_path() for t in tasks))
            planned.tasks_total = len(planned.task_paths)
            if tasks and all(_plain(t.run_once) is True for t in tasks):
                # every task runs once, on the play's first host: one milestone, not a line
                # per host of which all but one would say "no task ran on this host"
                planned.hosts = planned.hosts[:1]
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
    plan._render = None
    return plan


def _plain(value: Any) -> Any:
    """ansible 2.19 tags strings it loaded; hand plain ones to JSON."""
    if isinstance(value, bool | int | float) or value is None:
        return value
    return str(value)


def plan_in_subprocess(
    playbook: str,
    inventories: Sequence[str],
    extra_args: Sequence[str],
    env: Mapping[str, str] | None = None,
    timeout: float = 300,
) -> Plan:
    """Run the planner in a child process; raise ``RunError`` with ansible's message if it fails."""
    proc = start_subprocess(playbook, inventories, extra_args, env)
    return finish_subprocess(proc, timeout)


def start_subprocess(
    playbook: str,
    inventories: Sequence[str],
    extra_args: Sequence[str],
    env: Mapping[str, str] | None = None,
) -> subprocess.Popen[str]:
    argv = [sys.executable, "-m", "ansible_collections.sglang_lxc.serving.runner.planner", playbook]
    for inv in inventories:
        argv += ["-i", inv]
    argv += ["--ansible-args", json.dumps(planner_args(extra_args))]
    child_env = {**os.environ, **(env or {}), "ANSIBLE_FORCE_COLOR": "0", "ANSIBLE_NOCOLOR": "1"}
    return subprocess.Popen(
        argv,
        stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env,
        start_new_session=True,  # Ctrl-C on the terminal goes to the runner, not here
    )


def finish_subprocess(proc: subprocess.Popen[str], timeout: float = 300) -> Plan:
    try:
        out, err = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.communicate()
        raise RunError("listing the plays timed out") from None
    if proc.returncode != 0:
        lines = [line for line in err.splitlines() if line.strip()]
        raise RunError(lines[-1] if lines else f"planner exited with {proc.returncode}")
    for line in reversed(out.splitlines()):
        if line.startswith(PLAN_MARKER):
            return Plan.from_dict(json.loads(line[len(PLAN_MARKER):]))
    raise RunError("the planner printed no plan")


def main(argv: Sequence[str] | None = None) -> int:
    """``python -m ansible_collections.sglang_lxc.serving.runner.planner PLAYBOOK -i INV
    --ansible-args '["--limit", "x"]'``."""
    parser = argparse.ArgumentParser(prog=f"python -m {__spec__.name}")
    parser.add_argument("playbook")
    parser.add_argument("-i", "--inventory", action="append", default=[])
    parser.add_argument("--ansible-args", default="[]", help="ansible-playbook options (JSON list)")
    args = parser.parse_args(argv)
    try:
        plan = plan_playbook(args.playbook, args.inventory, json.loads(args.ansible_args))
    except Exception as exc:
        sys.stderr.write(f"{type(exc).__name__}: {' '.join(str(exc).split())}\n")
        return 1
    # on a line of its own: ansible may print warnings on stdout
    sys.stdout.write(f"\n{PLAN_MARKER}{json.dumps(plan.to_dict())}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
