"""Command line: ``sglang-lxc run|lab|status``."""

from __future__ import annotations

import argparse
import json
import os
import sys

from . import __version__
from .checklist import Checklist, ExitCode
from .errors import SglangLxcError
from .render_live import VIEWS

EXIT_CODES_HELP = """exit codes:
  0    every milestone completed or skipped
  1    the playbook could not run (missing file, syntax error, ansible crashed)
  2    at least one milestone failed
  3    hosts unreachable (and no task failed)
  64   bad command line
  130  interrupted (Ctrl-C, SIGINT, SIGTERM): unfinished milestones are cancelled
"""


class _Parser(argparse.ArgumentParser):
    """Usage errors exit with 64 (EX_USAGE), so they never read as "milestones failed" (2)."""

    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(int(ExitCode.USAGE), f"{self.prog}: error: {message}\n")


def _env_flag(name: str) -> bool:
    return os.environ.get(name, "").lower() in ("1", "true", "yes", "on")


def _artifacts_option(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--artifacts",
        default=os.environ.get("SGLANG_LXC_ARTIFACTS", "artifacts"),
        help="artifact folder, one sub-folder per run (default: $SGLANG_LXC_ARTIFACTS or "
        "./artifacts)",
    )


def _build_parser() -> argparse.ArgumentParser:
    parser = _Parser(
        prog="sglang-lxc",
        description="Provision SGLang servers on Proxmox VE LXC containers.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        help="run a playbook through ansible-runner, reported as a todo checklist",
        description=(
            "Run PLAYBOOK through ansible-runner and report it as a todo checklist: live on the "
            "terminal, and as todo.json, todo.md and junit.xml in the run's artifact folder "
            "(and prometheus_targets.json, a Prometheus file_sd list, when roles publish "
            "targets). "
            "Unknown options go to ansible-playbook (e.g. --limit, -e, --tags, --check)."
        ),
        epilog=EXIT_CODES_HELP,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    run.add_argument("playbook", help="playbook path, e.g. site.yml")
    run.add_argument(
        "-i",
        "--inventory",
        action="append",
        default=None,
        help="inventory path (repeatable; default: $SGLANG_LXC_INVENTORY or inventory/lab)",
    )
    _artifacts_option(run)
    run.add_argument(
        "--view",
        choices=VIEWS,
        default=os.environ.get("SGLANG_LXC_VIEW", "auto"),
        help="live table, plain lines, or auto: live on a terminal, plain when not a TTY or "
        "when CI is set (default: $SGLANG_LXC_VIEW or auto)",
    )
    run.add_argument(
        "--ansible-output",
        action="store_true",
        default=_env_flag("SGLANG_LXC_ANSIBLE_OUTPUT"),
        help="also stream ansible-playbook's own output (implies --view plain; "
        "default: $SGLANG_LXC_ANSIBLE_OUTPUT)",
    )
    run.add_argument(
        "--keep-events",
        action="store_true",
        default=_env_flag("SGLANG_LXC_KEEP_EVENTS"),
        help="write every ansible-runner event to job_events/ (default: only play starts, "
        "failures and stats; $SGLANG_LXC_KEEP_EVENTS)",
    )

    status = sub.add_parser(
        "status",
        help="print the last run's checklist again",
        description="Print a run's checklist from its todo.json (the last run by default).",
    )
    _artifacts_option(status)
    status.add_argument("--run", dest="run_id", default=None, help="run id (a folder name)")
    status.add_argument(
        "--format",
        choices=("table", "plain", "json", "markdown"),
        default="table",
        help="table (rich), plain lines, the todo.json document, or the Markdown summary",
    )

    lab = sub.add_parser("lab", help="the local lab: this machine acts as a Proxmox node")
    lab.add_argument("action", choices=["up", "down", "status"])
    lab.add_argument(
        "--containers",
        type=int,
        default=int(os.environ.get("SGLANG_LXC_LAB_CONTAINERS", "1")),
        help="how many lab containers (default: $SGLANG_LXC_LAB_CONTAINERS or 1)",
    )
    return parser


def main(argv: list[str] | None = None) -> int:
    parser = _build_parser()
    args, extra = parser.parse_known_args(argv)
    try:
        if args.command == "run":
            from .executor import refused_option, run_playbook

            why = refused_option(extra)
            if why:
                print(f"sglang-lxc run: {why}", file=sys.stderr)
                return int(ExitCode.USAGE)

            default_inventory = os.environ.get("SGLANG_LXC_INVENTORY", "inventory/lab")
            return run_playbook(
                args.playbook,
                args.inventory or [default_inventory],
                extra,
                artifacts=args.artifacts,
                view=args.view,
                ansible_output=args.ansible_output,
                keep_events=args.keep_events,
            )
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command == "status":
            return _status(args)
        if args.command == "lab":
            from . import lab

            return lab.main(args.action, containers=args.containers)
    except SglangLxcError as exc:
        print(f"sglang-lxc: {exc}", file=sys.stderr)
        return int(ExitCode.ERROR)
    parser.error(f"unknown command {args.command}")
    return int(ExitCode.USAGE)


def dead_run(checklist: Checklist) -> str | None:
    """Why a run recorded as running is not running any more (None: it runs, or ended)."""
    import socket

    from .procs import alive

    run = checklist.run
    if run.status != "running" or run.exit_code is not None:
        return None
    if run.pid is None:
        if run.runner_pid and run.host in ("", socket.gethostname()) and not alive(
                run.runner_pid):
            return f"sglang-lxc run (pid {run.runner_pid}) is gone; last known state below"
        return None  # ansible-playbook has not started yet
    if run.host and run.host != socket.gethostname():
        return None  # on another controller: cannot check from here
    if not alive(run.pid, run.pid_started):
        return f"ansible-playbook (pid {run.pid} on {run.host}) is gone; last known state below"
    if run.runner_pid and not alive(run.runner_pid):
        return (f"sglang-lxc run (pid {run.runner_pid}) is gone, ansible-playbook "
                f"(pid {run.pid}) still runs on its own; last known state below")
    return None


def _status(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .artifacts import find_run
    from .reports import TODO_JSON, read_json, render_markdown

    run_dir = find_run(Path(args.artifacts).resolve(), args.run_id)
    checklist = read_json(run_dir / TODO_JSON)
    dead = dead_run(checklist)
    if dead:
        checklist.run.status = "dead"
        checklist.run.notes.append(dead)
    if args.format == "json":
        data = json.loads((run_dir / TODO_JSON).read_text(encoding="utf-8"))
        if dead:
            data["run"]["status"] = "dead"
            data["run"]["notes"] = [*data["run"].get("notes", []), dead]
        sys.stdout.write(json.dumps(data, indent=2, ensure_ascii=False) + "\n")
        return 0
    if args.format == "markdown":
        sys.stdout.write(render_markdown(checklist))
        return 0
    from .render_live import checklist_table, plain_line, summary_line

    header = f"{checklist.run.id} · {checklist.run.playbook} · {checklist.run.status}"
    if dead:
        header += f" ({dead})"
    if args.format == "plain":
        lines = [header, *(plain_line(i) for i in checklist.items), summary_line(checklist)]
        sys.stdout.write("\n".join(lines) + "\n")
        return 0
    from rich.console import Console

    console = Console()
    console.print(checklist_table(checklist, title=header))
    console.print(summary_line(checklist), highlight=False)
    return 0


if __name__ == "__main__":
    sys.exit(main())
