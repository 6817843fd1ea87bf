#!/usr/bin/env python3
"""How long does a `site.yml` rerun take when nothing needs to change? Prints figures.

Times the no-op rerun of `site.yml` on the lab (this machine as the Proxmox node, containers on
lxcbr0) in up to three cases, in one run so that their ratios are comparable:

  base    today's roles: `ansible-playbook site.yml` run from another checkout (--base, by
          default /work/base, main before issue 12), one container (ct200)
  tree    this checkout's roles, one container (ct200)
  tree3   this checkout's roles, three containers (ct200, ct201, ct202: the lab's
          `--containers 3`, SGLANG_LXC_LAB_CONTAINERS=3)

Each case converges first (one untimed run, which may take minutes on a new container), then
reruns `site.yml` --repeat times and keeps the fastest rerun. A rerun that changed something is
reported as such: it is not a no-op. For the fastest rerun it prints wall seconds (the whole
`ansible-playbook` process, start-up included) and, per play, seconds, tasks started and the
per-host results (ok without change / changed / skipped), recorded by
benchmarks/callbacks/play_timer.py. Both checkouts run with the same ansible-core (this venv's)
and their own ansible.cfg; the todo callback stays on as each ansible.cfg has it.

    flock /tmp/suite-ct200.lock .venv/bin/python benchmarks/noop_rerun.py --repeat 3
    .venv/bin/python benchmarks/noop_rerun.py --cases tree --repeat 5 --no-converge

Each case holds /tmp/suite-ct200.lock while it converges and times (ct200 is the lab's shared
container), unless a parent process holds it already (`flock ... benchmarks/noop_rerun.py`).
The three-container case first converges ct201 and ct202 alone (`--limit`, ct200 untouched and
not locked): their first stack install takes minutes (with pip about 7 min each on 2 cores; with
uv and a warm node cache well under a minute). They are left running, so the next benchmark
reuses them; remove them with `tests/standins/pct stop 201 && tests/standins/pct destroy 201`.
Not a test: a shared machine is noisy, hence best of N; compare figures from one run.
"""

from __future__ import annotations

import argparse
import fcntl
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
CALLBACKS = Path(__file__).resolve().parent / "callbacks"
LOCK = Path("/tmp/suite-ct200.lock")
SLOWEST = 8
_RECAP = re.compile(r"^(\S+)\s+:\s+ok=(\d+)\s+changed=(\d+)\s+unreachable=(\d+)\s+failed=(\d+)"
                    r"\s+skipped=(\d+)", re.M)


def environment(tree: Path, containers: int, out: Path, artifacts: Path) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ANSIBLE_")}
    enabled = ["play_timer"]
    cfg = (tree / "ansible.cfg").read_text()
    match = re.search(r"^callbacks_enabled\s*=\s*(.+)$", cfg, re.M)
    if match:
        enabled = [c.strip() for c in match.group(1).split(",") if c.strip()] + enabled
    plugin_dirs = [str(tree / p.strip()) for p in
                   (re.search(r"^callback_plugins\s*=\s*(.+)$", cfg, re.M) or
                    re.match(r"(.*)", "")).group(1).split(":") if p.strip()]
    env.update(
        ANSIBLE_CONFIG=str(tree / "ansible.cfg"),
        ANSIBLE_CALLBACKS_ENABLED=",".join(enabled),
        ANSIBLE_CALLBACK_PLUGINS=":".join([*plugin_dirs, str(CALLBACKS)]),
        ANSIBLE_NOCOLOR="1",
        PLAY_TIMER_OUT=str(out),
        SGLANG_LXC_ARTIFACTS=str(artifacts),
        SGLANG_LXC_TODO_LIVE="0",
        SGLANG_LXC_LAB_CONTAINERS=str(containers),
        PATH=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]),
    )
    return env


# The lab's containers 2..N alone (ct201, ct202), without ct200: --limit keeps ct200 out of it.
NEW_ONLY = ["--limit", "localhost:ct201:ct202", "-e", '{"proxmox_lxc_containers": "{{ (3 | '
            'lab_containers(lab_root, subnet=lab_subnet, bridge=lab_bridge))[1:] }}"}']


PLAYBOOK = "site.yml"


def run_site(tree: Path, containers: int, work: Path, log: Path,
             extra: list[str] | None = None) -> dict:
    out = work / "plays.json"
    out.unlink(missing_ok=True)
    env = environment(tree, containers, out, work / "artifacts")
    start = time.perf_counter()
    proc = subprocess.run([str(Path(sys.executable).parent / "ansible-playbook"), PLAYBOOK,
                           *(extra or [])],
                          cwd=tree, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                          text=True)
    wall = time.perf_counter() - start
    log.write_text(proc.stdout)
    if proc.returncode != 0:
        raise SystemExit(f"{PLAYBOOK} in {tree} ({containers} container(s)) failed with "
                         f"{proc.returncode}; log: {log}\n{proc.stdout[-3000:]}")
    recap = {m[0]: {"ok": int(m[1]), "changed": int(m[2]), "skipped": int(m[5])}
             for m in _RECAP.findall(proc.stdout)}
    data = json.loads(out.read_text()) if out.is_file() else {"plays": []}
    return {"wall": wall, "recap": recap, **data}


def report(name: str, run: dict, runs: list[float]) -> None:
    changed = sum(h["changed"] for h in run["recap"].values())
    print(f"\n== {name}: best {run['wall']:.2f} s of {len(runs)} reruns "
          f"({', '.join(f'{w:.2f}' for w in runs)}); changed={changed}"
          f"{'' if changed == 0 else '  (NOT a no-op)'}")
    outside = run["wall"] - sum(p["seconds"] for p in run["plays"])
    print(f"   ansible start-up and recap: {outside:.2f} s")
    print(f"   {'play':<58} {'s':>6} {'tasks':>5} {'ok':>4} {'chg':>4} {'skip':>4}")
    for play in run["plays"]:
        print(f"   {play['name'][:58]:<58} {play['seconds']:6.2f} {play['tasks']:5d} "
              f"{play['ok']:4d} {play['changed']:4d} {play['skipped']:4d}")
    total = {k: sum(p[k] for p in run["plays"]) for k in ("tasks", "ok", "changed", "skipped")}
    slow = sorted(run.get("tasks", []), key=lambda t: -t[2])[:SLOWEST]
    print(f"   {'all plays':<58} {sum(p['seconds'] for p in run['plays']):6.2f} "
          f"{total['tasks']:5d} {total['ok']:4d} {total['changed']:4d} {total['skipped']:4d}")
    print("   slowest tasks: " + "; ".join(f"{name} {sec:.2f} s" for _, name, sec in slow))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base", type=Path, default=Path("/work/base"),
                        help="checkout with today's roles (/work/base)")
    parser.add_argument("--cases", default="base,tree,tree3",
                        help="comma-separated: base, tree, tree3 (all three)")
    parser.add_argument("--repeat", type=int, default=3, help="timed reruns per case (3)")
    parser.add_argument("--no-converge", action="store_true",
                        help="skip the untimed converge run (the lab is converged already)")
    parser.add_argument("--json", type=Path, help="also write all figures to this file")
    parser.add_argument("--playbook", default="site.yml",
                        help="time this playbook instead (e.g. playbooks/containers.yml)")
    args = parser.parse_args(argv)
    global PLAYBOOK
    PLAYBOOK = args.playbook
    cases = {"base": (args.base.resolve(), 1), "tree": (ROOT, 1), "tree3": (ROOT, 3)}
    chosen = [c.strip() for c in args.cases.split(",") if c.strip()]
    unknown = set(chosen) - set(cases)
    if unknown:
        parser.error(f"unknown case(s): {', '.join(sorted(unknown))}")

    results: dict[str, dict] = {}
    with tempfile.TemporaryDirectory(prefix="noop-rerun-") as tmp:
        for case in chosen:
            tree, containers = cases[case]
            work = Path(tmp) / case
            work.mkdir()
            if not args.no_converge and containers > 1:
                # the new containers' first stack install takes minutes: ct200 is not locked
                t0 = time.perf_counter()
                run_site(tree, containers, work, work / "converge-new.log", NEW_ONLY)
                print(f"{case}: converged ct201, ct202 alone in {time.perf_counter() - t0:.1f} s",
                      flush=True)
            lock = ct200_lock()
            if not args.no_converge:
                t0 = time.perf_counter()
                run_site(tree, containers, work, work / "converge.log")
                print(f"{case}: converged in {time.perf_counter() - t0:.1f} s", flush=True)
            runs = []
            for rep in range(args.repeat):
                run = run_site(tree, containers, work, work / f"rerun{rep}.log")
                runs.append(run)
                print(f"{case}: rerun {rep + 1}: {run['wall']:.2f} s", flush=True)
            lock.close()  # released: other suites may use ct200 between the cases
            best = min(runs, key=lambda r: r["wall"])
            results[case] = {**best, "walls": [r["wall"] for r in runs]}
            report(f"{case} ({tree}, {containers} container(s))", best, results[case]["walls"])

    print()
    if "base" in results and "tree" in results:
        ratio = results["base"]["wall"] / results["tree"]["wall"]
        print(f"today / this tree, one container: {ratio:.1f}x faster "
              f"(goal >= 10x; this tree {results['tree']['wall']:.2f} s, goal <= 3 s)")
    if "tree" in results and "tree3" in results:
        ratio = results["tree3"]["wall"] / results["tree"]["wall"]
        print(f"three containers / one container: {ratio:.2f} (goal <= 1.3)")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1))
    return 0


def ct200_lock():
    """Hold /tmp/suite-ct200.lock (unless a parent process holds it already)."""
    lock = LOCK.open("a")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        if not _parent_holds_lock():
            print(f"waiting for {LOCK} (ct200 is in use)...", flush=True)
            fcntl.flock(lock, fcntl.LOCK_EX)
    return lock


def _parent_holds_lock() -> bool:
    """True when a process above us holds the lock (run under `flock LOCK cmd`)."""
    try:
        locks = Path("/proc/locks").read_text()
        inode = os.stat(LOCK).st_ino
    except OSError:
        return False
    holders = {int(f[4]) for f in (line.split() for line in locks.splitlines())
               if len(f) > 5 and f[5].endswith(f":{inode}")}
    pid = os.getppid()
    while pid > 1:
        if pid in holders:
            return True
        try:
            pid = int(Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            return False
    return False


if __name__ == "__main__":
    sys.exit(main())
