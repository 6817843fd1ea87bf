#!/usr/bin/env python3
"""No-op reruns of the container-side playbooks, old roles against new, on one lab container.

Makes (or reuses) a lab container, converges it with the roles of each ``--checkout`` in turn
(default: this one), then reruns each playbook ``--repeat`` times, the checkouts alternating so
both meet the same load, and prints per playbook and checkout the median seconds, the task count
(ok + skipped, per the recap) and changed. Both sets of roles find the same converged host, and
``converge_changed`` says whether one undoes the other (0: they agree on the host's state).

    .venv/bin/python benchmarks/noop_roles.py --vmid 206 --checkout ../base --checkout .

Not a test: timings on a shared machine are noisy; medians are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from tests.lablib import LabContainer, lab_env, write_inventory  # noqa: E402

PLAYBOOKS = ["playbooks/preflight.yml", "playbooks/toolchain.yml", "playbooks/serve.yml"]
RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=\d+\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)", re.M)


def play(checkout: Path, ct: LabContainer, playbook: str) -> dict:
    cmd = [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(ct.inventory),
           "--limit", ct.name, str(checkout / playbook)]
    env = lab_env(ANSIBLE_CONFIG=str(checkout / "ansible.cfg"))
    start = time.monotonic()
    proc = subprocess.run(cmd, cwd=checkout, env=env, capture_output=True, text=True,
                          timeout=3600)
    seconds = time.monotonic() - start
    stats = next((m.groupdict() for m in RECAP.finditer(proc.stdout)
                  if m["host"] == ct.name), None)
    if proc.returncode != 0 or stats is None:
        raise SystemExit(f"{playbook} failed (rc {proc.returncode}):\n{proc.stdout[-4000:]}")
    return {"seconds": round(seconds, 2), "tasks": int(stats["ok"]) + int(stats["skipped"]),
            "changed": int(stats["changed"]), "skipped": int(stats["skipped"])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vmid", type=int, default=206)
    parser.add_argument("--checkout", type=Path, action="append",
                        help="a checkout whose roles run (repeatable; default: this one)")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the container running")
    parser.add_argument("--playbooks", nargs="*", default=PLAYBOOKS)
    args = parser.parse_args()
    checkouts = [c.resolve() for c in (args.checkout or [ROOT])]
    os.environ.setdefault("SGLANG_LXC_ARTIFACTS", tempfile.mkdtemp(prefix="noop-roles-"))

    workdir = Path(tempfile.gettempdir()) / f"noop-roles-ct{args.vmid}"
    spec = {"name": f"ct{args.vmid}", "vmid": args.vmid, "ip": f"10.0.3.{args.vmid}/24",
            "gateway": "10.0.3.1"}
    ct = LabContainer(args.vmid, workdir, spec)
    write_inventory(ct)
    running = subprocess.run([str(ROOT / "tests/standins/pct"), "status", str(args.vmid)],
                             capture_output=True, text=True, env=lab_env()).stdout
    if "running" not in running:
        result = ct.provision()
        if result.rc != 0:
            raise SystemExit(str(result))
    figures: dict[str, dict] = {}
    try:
        for playbook in args.playbooks:
            converge = {str(c): play(c, ct, playbook)["changed"] for c in checkouts}
            runs: dict[str, list[dict]] = {str(c): [] for c in checkouts}
            for _ in range(args.repeat):
                for c in checkouts:
                    runs[str(c)].append(play(c, ct, playbook))
            figures[playbook] = {
                str(c): {
                    "converge_changed": converge[str(c)],
                    "noop_seconds_median": round(
                        statistics.median(r["seconds"] for r in runs[str(c)]), 2),
                    "noop_seconds": [r["seconds"] for r in runs[str(c)]],
                    "tasks": runs[str(c)][-1]["tasks"],
                    "skipped": runs[str(c)][-1]["skipped"],
                    "changed": max(r["changed"] for r in runs[str(c)]),
                }
                for c in checkouts
            }
            print(playbook, json.dumps(figures[playbook]), flush=True)
    finally:
        if not args.keep:
            ct.destroy()
    totals = {str(c): round(sum(f[str(c)]["noop_seconds_median"] for f in figures.values()), 2)
              for c in checkouts}
    print(json.dumps({"vmid": args.vmid, "noop_seconds_total": totals, "playbooks": figures},
                     indent=2))


if __name__ == "__main__":
    main()
