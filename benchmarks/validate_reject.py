#!/usr/bin/env python3
"""How fast does the validate play reject a bad inventory on the lab? Prints figures.

Runs ``ansible-playbook site.yml -i inventory/lab`` with several inventory mistakes at once (the
same set as tests/integration/proxmox_lxc/test_bad_input.py, without its live ct213) and, for
comparison, ``playbooks/validate.yml`` with the lab inventory as it is, and ``site.yml`` with a
model that cannot fit its instances (a sparse 600 GiB safetensors file in a model store of its
own, NVML answered by the GPU stand-in's recording of 8x RTX PRO 6000, as in
test_bad_input.py's fit test). Output lines are
time-stamped as they arrive, so the figures split ansible-playbook's own start-up (parsing
site.yml and every role) from the validation itself (first validate play line to the verdict).

    .venv/bin/python benchmarks/validate_reject.py --repeat 3

Not a test: timings on a shared machine are noisy; medians are printed.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
BIN = Path(sys.executable).parent
sys.path.insert(0, str(ROOT))
from tests.lablib import fit_scenario  # noqa: E402  (the repository root is put on the path just above)


def ct(num: int, **kw) -> dict:
    return {"name": f"ct{num}", "vmid": num, "ip": f"10.0.3.{num}/24", "gateway": "10.0.3.1", **kw}


MISTAKES = {
    "proxmox_lxc_containers": [
        ct(211, vmid=200),
        ct(212, hostname="ct200"),
        ct(214, ip="10.0.3.200/24"),
        ct(215, cores=0, memory="16G"),
        ct(216, ip="10.0.9.216/24", gateway="10.0.9.1"),
        ct(217, hostname="bad;name here", gpus=[0, 0], mounts={"host_path": "/x", "path": "/x"}),
        ct(218, cores=999, coress=2),
        ct(219, template="local:vztmpl/no-such-template.tar.zst"),
    ],
    "sglang_serve_instnaces": [{"name": "tp8", "gpus": [0, 1]}],
    "sglang_serve_enabled": True,
    "sglang_serve_gpu_count": 2,
    "sglang_serve_model_path": "../../etc",
}


def run(playbook: str, extra: dict | None, args: list[str] | None = None,
        more_env: dict[str, str] | None = None) -> dict[str, float]:
    cmd = [str(BIN / "ansible-playbook"), "-i", "inventory/lab", *(args or []), playbook]
    if extra:
        cmd += ["-e", json.dumps(extra)]
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "PYTHONUNBUFFERED": "1",
           "PATH": f"{BIN}{os.pathsep}{os.environ.get('PATH', '')}", **(more_env or {})}
    start = time.monotonic()
    first_play = verdict = None
    checking = False
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True)
    for line in proc.stdout:
        now = time.monotonic() - start
        if first_play is None and line.startswith("PLAY ["):
            first_play = now
        # the check task fails itself with every problem: its result line is the verdict
        if "Validate | Check every input" in line:
            checking = True
        elif checking and verdict is None and line.startswith(("fatal:", "ok:", "PLAY")):
            verdict = now
    proc.wait()
    total = time.monotonic() - start
    return {"rc": proc.returncode, "startup": first_play or total,
            "validation": (verdict or total) - (first_play or 0), "total": total}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    folder = Path(tempfile.mkdtemp(prefix="validate-fit-"))
    fit_file, _store, fit_env = fit_scenario(folder, weights_bytes=600 * 2**30)
    fit_args = ["-i", str(fit_file)]
    for label, book, extra, more, env in (
        ("site.yml, 14 mistakes", "site.yml", MISTAKES, None, None),
        ("validate.yml, lab as is", "playbooks/validate.yml", None, None, None),
        ("site.yml, 600 GiB model in 90 GB instances", "site.yml", None, fit_args, fit_env),
    ):
        runs = [run(book, extra, more, env) for _ in range(args.repeat)]
        med = {k: statistics.median(r[k] for r in runs) for k in ("startup", "validation", "total")}
        print(f"{label}: rc={[r['rc'] for r in runs]} median start-up {med['startup']:.1f} s, "
              f"validation {med['validation']:.1f} s, total {med['total']:.1f} s "
              f"(runs: {', '.join(format(r['total'], '.1f') for r in runs)})")
    shutil.rmtree(folder)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
