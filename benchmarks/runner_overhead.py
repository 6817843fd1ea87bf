#!/usr/bin/env python3
"""What does the todo checklist cost over a bare ``ansible-playbook``? Prints figures.

Runs one generated playbook (N trivial tasks on localhost, local connection) alternately with
a bare ``ansible-playbook`` (the todo callback off), ``ansible-playbook`` with the todo callback
(as ansible.cfg enables it: checklist, reports), and ``sglang-lxc run`` (ansible-runner, the
callback, plain view), several times, and prints wall-clock and CPU times (user+sys of the whole
process tree, steadier than wall time on a busy machine), their medians and ratios. The target:
the callback costs <= 2 % CPU. ``--bare-runner`` adds ``ansible_runner.run()`` with neither the
callback nor a handler, to split ansible-runner's own cost from ours.

    .venv/bin/python benchmarks/runner_overhead.py --tasks 200 --repeat 3 --module ping

Not a test: timings on a shared machine are noisy, so runs alternate and medians are compared.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

RUNNER = "ansible_collections.sglang_lxc.serving.runner"

ROOT = Path(__file__).resolve().parent.parent
MODULES = {
    # a module that runs on the host (forks a Python interpreter per task), like most real tasks
    "ping": "ansible.builtin.ping: {}",
    "command": 'ansible.builtin.command: "true"\n      changed_when: false',
    # an action that stays in the controller: the harshest case for any per-event cost
    "debug": "ansible.builtin.debug:\n        msg: step",
}


def write_project(where: Path, tasks: int, module: str) -> tuple[Path, Path]:
    inventory = where / "inventory.ini"
    inventory.write_text(
        f"localhost ansible_connection=local ansible_python_interpreter={sys.executable}\n"
    )
    body = "\n".join(
        f"    - name: Bench | step {i}\n      {MODULES[module]}" for i in range(tasks)
    )
    playbook = where / "bench.yml"
    playbook.write_text(
        "---\n- name: Benchmark\n  hosts: localhost\n  gather_facts: false\n  vars:\n"
        "    todo_content: \"Run {{ inventory_hostname }} benchmark\"\n    todo_priority: low\n"
        f"  tasks:\n{body}\n"
    )
    return playbook, inventory


def environment() -> dict[str, str]:
    env = {**os.environ, "CI": "1", "ANSIBLE_FORCE_COLOR": "0"}
    config = ROOT / "ansible.cfg"
    if config.is_file() and "ANSIBLE_CONFIG" not in os.environ:
        env["ANSIBLE_CONFIG"] = str(config)  # what sglang-lxc run uses too
    bin_dir = str(Path(sys.executable).parent)
    env["PATH"] = os.pathsep.join([bin_dir, env.get("PATH", os.defpath)])
    return env


def cpu_of_children() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def timed(argv: list[str], cwd: Path, env: dict[str, str]) -> tuple[float, float]:
    """(wall seconds, CPU seconds of the process and everything it waited for)."""
    cpu0, start = cpu_of_children(), time.perf_counter()
    proc = subprocess.run(argv, cwd=cwd, env={**environment(), **env}, stdout=subprocess.DEVNULL,
                          stderr=subprocess.PIPE, text=True)
    elapsed, cpu = time.perf_counter() - start, cpu_of_children() - cpu0
    if proc.returncode != 0:
        raise SystemExit(f"{argv[0:4]} failed with {proc.returncode}:\n{proc.stderr[-2000:]}")
    return elapsed, cpu


BARE_RUNNER = """
import os, sys, ansible_runner
os.makedirs(sys.argv[1], exist_ok=True)
r = ansible_runner.run(private_data_dir=sys.argv[1], playbook=sys.argv[2], inventory=sys.argv[3],
                       quiet=True)
sys.exit(r.rc)
"""


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", type=int, default=200, help="tasks in the playbook (200)")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each kind (3)")
    parser.add_argument("--module", choices=sorted(MODULES), default="ping",
                        help="what each task does (ping)")
    parser.add_argument("--warmup", type=int, default=1,
                        help="untimed runs of each kind first (1)")
    parser.add_argument("--bare-runner", action="store_true",
                        help="also time ansible_runner.run() without handlers")
    args = parser.parse_args(argv)

    with tempfile.TemporaryDirectory(prefix="sglang-lxc-bench-") as tmp:
        where = Path(tmp)
        playbook, inventory = write_project(where, args.tasks, args.module)
        ansible_playbook = [str(Path(sys.executable).parent / "ansible-playbook"),
                            "-i", str(inventory), str(playbook)]
        bare_cfg = where / "ansible-bare.cfg"  # the project's configuration, callback off
        bare_cfg.write_text("".join(
            line for line in (ROOT / "ansible.cfg").read_text().splitlines(keepends=True)
            if not line.startswith(("callbacks_enabled", "callback_plugins"))
        ).replace("= .collections", f"= {ROOT / '.collections'}"))
        off = {"ANSIBLE_CONFIG": str(bare_cfg)}
        on = {"SGLANG_LXC_ARTIFACTS": str(where / "artifacts")}
        kinds: dict[str, tuple[list[str], dict[str, str]]] = {
            "ansible-playbook": (ansible_playbook, off),
            "ansible-playbook+todo": (ansible_playbook, on),
            "sglang-lxc run": ([sys.executable, "-m", f"{RUNNER}.cli", "run", "-i",
                                str(inventory), str(playbook), "--artifacts",
                                str(where / "artifacts"), "--view", "plain"], {}),
        }
        if args.bare_runner:
            kinds["ansible-runner (bare)"] = ([sys.executable, "-c", BARE_RUNNER,
                                               str(where / "bare"), str(playbook),
                                               str(inventory)], off)
        # warm-up runs (page cache, .pyc), then alternate the kinds
        for _ in range(args.warmup):
            for argv_, env in kinds.values():
                timed(argv_, where, env)
        wall: dict[str, list[float]] = {k: [] for k in kinds}
        cpu: dict[str, list[float]] = {k: [] for k in kinds}
        for rep in range(args.repeat):
            for kind, (argv_, env) in kinds.items():
                elapsed, used = timed(argv_, where, env)
                wall[kind].append(elapsed)
                cpu[kind].append(used)
                print(f"rep {rep + 1}: {kind:<22} wall {elapsed:7.2f} s   cpu {used:7.2f} s",
                      flush=True)

    print(f"\n{args.tasks} x {args.module} on localhost, {args.repeat} runs each:")
    for label, figures in (("wall", wall), ("cpu", cpu)):
        base = statistics.median(figures["ansible-playbook"])
        print(f"  {label} (median, min):")
        for kind, values in figures.items():
            median = statistics.median(values)
            print(f"    {kind:<22} {median:7.2f} s  {min(values):7.2f} s  "
                  f"ratio {median / base:5.3f}  overhead {100 * (median / base - 1):+5.1f} %")
    for kind, target in (("ansible-playbook+todo", 1.02), ("sglang-lxc run", None)):
        for label, figures in (("wall", wall), ("cpu", cpu)):
            ratio = statistics.median(figures[kind]) / statistics.median(
                figures["ansible-playbook"])
            verdict = ""
            if target is not None and label == "cpu":
                verdict = f" ({'within' if ratio <= target else 'over'} the 2% target)"
            print(f"{kind} / bare ansible-playbook ({label}) = {ratio:.3f}{verdict}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
