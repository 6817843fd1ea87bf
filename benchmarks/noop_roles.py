#!/usr/bin/env python3
"""No-op reruns of the container-side playbooks, old roles against new, on one lab container.

Makes (or reuses) a lab container, converges it with the roles of ``--checkout`` (default: this
one), then reruns each playbook ``--repeat`` times and prints, per playbook, the median seconds,
the task count (ok + changed + skipped, per the recap) and changed. Run it once with
``--checkout /path/to/old/checkout --keep`` and once with this checkout on the same container:
both sets of roles then find the same converged host.

    .venv/bin/python benchmarks/noop_roles.py --vmid 206 --checkout ../base --keep
    .venv/bin/python benchmarks/noop_roles.py --vmid 206

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
    parser.add_argument("--checkout", type=Path, default=ROOT)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--keep", action="store_true", help="leave the container running")
    parser.add_argument("--playbooks", nargs="*", default=PLAYBOOKS)
    args = parser.parse_args()
    checkout = args.checkout.resolve()
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
            converge = play(checkout, ct, playbook)
            runs = [play(checkout, ct, playbook) for _ in range(args.repeat)]
            figures[playbook] = {
                "converge_changed": converge["changed"],
                "noop_seconds_median": round(statistics.median(r["seconds"] for r in runs), 2),
                "noop_seconds": [r["seconds"] for r in runs],
                "tasks": runs[-1]["tasks"],
                "skipped": runs[-1]["skipped"],
                "changed": max(r["changed"] for r in runs),
            }
            print(playbook, json.dumps(figures[playbook]), flush=True)
    finally:
        if not args.keep:
            ct.destroy()
    total = sum(f["noop_seconds_median"] for f in figures.values())
    print(json.dumps({"checkout": str(checkout), "vmid": args.vmid,
                      "noop_seconds_total": round(total, 2), "playbooks": figures}, indent=2))


if __name__ == "__main__":
    main()
