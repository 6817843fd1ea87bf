"""After a GPU drain: the GPUs are free for serving, and the drain left no lasting config.

Run after `playbooks/drain.yml`: pytest tests/infra/test_gpu_drain.py --hosts=ansible://all
--ansible-inventory=inventory/example
"""

import fnmatch
import json

import pytest

GPU_TOOLS_PYTHON = "/opt/sglang/gpu-tools/bin/python"
KEEP = ["sglang@*", "sglang-router*", "nvidia-persistenced.service"]

# Every process with /dev/nvidia* open and the innermost systemd unit of its cgroup.
HOLDERS = r"""
import json, os
out = []
for pid in filter(str.isdigit, os.listdir("/proc")):
    try:
        devs = sorted({os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")}
                      )
        cg = open(f"/proc/{pid}/cgroup").read()
    except OSError:
        continue
    devs = [d for d in devs if d.startswith("/dev/nvidia")]
    if devs:
        parts = [p for line in cg.splitlines() for p in line.split(":", 2)[2].split("/")]
        units = [p for p in parts if p.endswith((".service", ".scope"))]
        out.append({"pid": int(pid), "unit": units[-1] if units else None, "devices": devs})
print(json.dumps(out))
"""


@pytest.mark.milestone("gpu_facts", unless_exists=GPU_TOOLS_PYTHON)
def test_gpu_tools_venv_has_pynvml(host):
    cmd = host.run(f"{GPU_TOOLS_PYTHON} -c 'import pynvml; print(pynvml.__name__)'")
    assert cmd.rc == 0, cmd.stderr
    assert cmd.stdout.strip() == "pynvml"


def test_only_our_units_hold_the_gpus(host):
    cmd = host.run(f"python3 -c '{HOLDERS}'")
    assert cmd.rc == 0, cmd.stderr
    others = [
        h
        for h in json.loads(cmd.stdout)
        if not any(fnmatch.fnmatchcase(h["unit"] or "", p) for p in KEEP)
    ]
    assert others == [], f"still holding the GPUs after the drain: {others}"


def test_drain_dropins_are_runtime_only(host):
    cmd = host.run("find /etc/systemd -name '50-sglang-lxc-gpu-drain.conf'")
    assert cmd.stdout.strip() == ""
