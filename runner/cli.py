"""Command line: ``sglang-lxc run|lab|status``."""

from __future__ import annotations

import argparse
import os
import sys

from . import __version__
from .errors import SglangLxcError


def _build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="sglang-lxc",
        description="Provision SGLang servers on Proxmox VE LXC containers.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True)

    run = sub.add_parser(
        "run",
        help="run a playbook through ansible-runner",
        description="Run PLAYBOOK through ansible-runner. Unknown options go to ansible-playbook.",
    )
    run.add_argument("playbook", help="playbook path, e.g. site.yml")
    run.add_argument(
        "-i",
        "--inventory",
        action="append",
        default=None,
        help="inventory path (repeatable; default: $SGLANG_LXC_INVENTORY or inventory/lab)",
    )
    run.add_argument(
        "--artifacts",
        default=os.environ.get("SGLANG_LXC_ARTIFACTS", "artifacts"),
        help="artifact folder (default: $SGLANG_LXC_ARTIFACTS or ./artifacts)",
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
            from .executor import run_playbook

            inventories = args.inventory or [os.environ.get("SGLANG_LXC_INVENTORY", "inventory/lab")]
            return run_playbook(args.playbook, inventories, extra, artifacts=args.artifacts)
        if extra:
            parser.error(f"unrecognized arguments: {' '.join(extra)}")
        if args.command == "lab":
            from . import lab

            return lab.main(args.action, containers=args.containers)
    except SglangLxcError as exc:
        print(f"sglang-lxc: {exc}", file=sys.stderr)
        return 2
    parser.error(f"unknown command {args.command}")
    return 2


if __name__ == "__main__":
    sys.exit(main())
