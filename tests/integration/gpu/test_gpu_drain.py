"""gpu_facts and gpu_drain on a real lab container (vmid 240): no GPU, no NVML driver.

A stand-in trainer unit checkpoints for ~3 s after SIGTERM; the drain must wait for it. A
workload that ignores SIGTERM must be left running (and the play fail) unless force is set.
The lab has no NVIDIA driver, so the memory wait is skipped with that reason. The tests run in
order and share the container.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest

from tests.lablib import pct

pytestmark = pytest.mark.lab

VMID = 240
FIXTURES = Path(__file__).with_name("fixtures")
DRAIN = "playbooks/drain.yml"
PREFLIGHT = "playbooks/preflight.yml"
CKPT = "/srv/checkpoints/trainer"


@pytest.fixture(scope="module")
def ct(lab_container):
    container = lab_container(VMID)
    container.exec("mkdir", "-p", "/opt/gpu-test", CKPT)
    for name, dest in [
        ("trainer.py", "/opt/gpu-test/trainer.py"),
        ("stubborn.py", "/opt/gpu-test/stubborn.py"),
        ("trainer.service", "/etc/systemd/system/trainer.service"),
        ("stubborn.service", "/etc/systemd/system/stubborn.service"),
        ("sglang@.service", "/etc/systemd/system/sglang@.service"),
    ]:
        pct("push", str(VMID), str(FIXTURES / name), dest, "--perms", "0644")
    container.exec("systemctl", "daemon-reload")
    return container


def sh(ct, script: str, check: bool = True) -> str:
    return ct.exec("sh", "-c", script, check=check).stdout.strip()


def active(ct, unit: str) -> str:
    return sh(ct, f"systemctl is-active {unit}", check=False)


def start_trainer(ct, hold: str | None = None) -> int:
    # a running trainer writes its checkpoint on the way out: stop it before clearing
    sh(ct, "systemctl stop trainer")
    sh(ct, f"rm -f {CKPT}/checkpoint.json {CKPT}/checkpoint.json.tmp {CKPT}/started")
    env = f"HOLD_DEVICE={hold}\n" if hold else ""
    sh(ct, f"printf '{env}' > /etc/default/gpu-test-trainer && systemctl start trainer")
    for _ in range(50):
        pid = sh(ct, f"cat {CKPT}/started 2>/dev/null", check=False)
        if pid:
            time.sleep(0.5)  # a few steps
            return int(pid)
        time.sleep(0.2)
    raise AssertionError("trainer did not start")


def flat(result) -> str:
    """The play's output with line wrapping undone (the YAML callback folds long strings)."""
    return " ".join(result.output.split())


def alive(ct, pid: int) -> bool:
    return sh(ct, f"kill -0 {pid} 2>/dev/null && echo yes || echo no") == "yes"


def checkpoint(ct) -> dict | None:
    text = sh(ct, f"cat {CKPT}/checkpoint.json 2>/dev/null", check=False)
    if not text:
        return None
    return json.loads(text.splitlines()[-1])


# --- preflight -------------------------------------------------------------------------------


def test_preflight_skips_gpu_checks_in_the_lab(ct):
    result = ct.run_playbook(PREFLIGHT)
    assert result.rc == 0, str(result)
    assert "SKIP nvml: no GPU" in flat(result)
    assert "SKIP nvidia_uvm: no GPU" in flat(result)
    assert "SKIP build_memory: no source build (sglang_kernel_from_source: false)" in flat(result)


def test_preflight_expecting_gpus_fails_with_fixes(ct):
    result = ct.run_playbook(PREFLIGHT, extra_vars={"sglang_lxc_gpus_expected": 8})
    assert result.rc != 0, str(result)
    assert "Preflight failed on ct240" in flat(result)
    assert "FAIL nvml: NVML cannot be read: NVMLError_LibraryNotFound" in flat(result)
    assert "--no-kernel-module" in flat(result)
    assert "FAIL nvidia_uvm" in flat(result) and "nvidia-modprobe -u -c=0" in flat(result)


# --- bad input: refused before anything is stopped -------------------------------------------


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (
            {"gpu_drain_units": ["trainer"], "gpu_drain_grace_seconds": 0},
            "gpu_drain_grace_seconds must be greater than 0",
        ),
        ({"gpu_drain_force": True}, "gpu_drain_force: true needs a selector"),
        ({"gpu_drain_units": ["train*"]}, "gpu_drain_units takes exact systemd unit names"),
        (
            {"gpu_drain_units": ["trainer"], "gpu_drain_grace_seconds": "soon"},
            "gpu_drain_grace_seconds",
        ),
    ],
)
def test_bad_input_is_refused_before_anything_stops(ct, extra, message):
    pid = start_trainer(ct)
    result = ct.run_playbook(DRAIN, extra_vars=extra)
    assert result.rc != 0, str(result)
    assert message in flat(result), str(result)
    assert result.changed == 0, str(result)
    assert alive(ct, pid) and active(ct, "trainer") == "active"


def test_selector_matching_nothing_warns(ct):
    result = ct.run_playbook(DRAIN, extra_vars={"gpu_drain_units": ["nosuch"]})
    assert result.rc == 0, str(result)
    assert "gpu_drain_units: nosuch.service matched nothing (no such unit)" in flat(result)


# --- the drain -------------------------------------------------------------------------------


def test_check_mode_stops_nothing(ct):
    pid = start_trainer(ct)
    result = ct.run_playbook(DRAIN, extra_vars={"gpu_drain_units": ["trainer"]}, check=True)
    assert result.rc == 0, str(result)
    assert alive(ct, pid) and checkpoint(ct) is None
    assert "check mode" in flat(result)


def test_drain_waits_for_the_checkpoint(ct):
    pid = start_trainer(ct)
    result = ct.run_playbook(
        DRAIN, extra_vars={"gpu_drain_units": ["trainer"], "gpu_drain_grace_seconds": 60}
    )
    assert result.rc == 0, str(result)
    assert not alive(ct, pid)
    ckpt = checkpoint(ct)
    assert ckpt is not None and ckpt["complete"] and ckpt["step"] > 0, ckpt
    assert ckpt["seconds"] >= 2.5
    assert sh(ct, f"ls {CKPT}") == "checkpoint.json\nstarted"  # no half-written file
    assert "1 process stopped (trainer.service)" in flat(result)
    assert (
        "Memory wait skipped: no NVML (NVMLError_LibraryNotFound: NVML Shared Library Not Found)"
        in flat(result)
    )
    # Restart=always must not bring it back after a deliberate stop
    time.sleep(3)
    assert active(ct, "trainer") == "inactive"
    # the drop-in is runtime only and forbids systemd's own SIGKILL
    dropin = sh(ct, "cat /run/systemd/system/trainer.service.d/50-sglang-lxc-gpu-drain.conf")
    assert "TimeoutStopSec=60s" in dropin and "SendSIGKILL=no" in dropin


def test_second_drain_changes_nothing(ct):
    result = ct.run_playbook(
        DRAIN, extra_vars={"gpu_drain_units": ["trainer"], "gpu_drain_grace_seconds": 60}
    )
    assert result.rc == 0, str(result)
    assert result.changed == 0, str(result)
    assert "nothing to stop" in flat(result)


def test_check_mode_on_a_drained_host_reports_no_change(ct):
    result = ct.run_playbook(
        DRAIN,
        extra_vars={"gpu_drain_units": ["trainer"], "gpu_drain_grace_seconds": 60},
        check=True,
    )
    assert result.rc == 0 and result.changed == 0, str(result)


def test_sigterm_ignored_is_left_running_without_force(ct):
    sh(ct, "systemctl start stubborn")
    pid = int(sh(ct, "systemctl show -p MainPID --value stubborn"))
    result = ct.run_playbook(
        DRAIN, extra_vars={"gpu_drain_units": ["stubborn"], "gpu_drain_grace_seconds": 3}
    )
    assert result.rc != 0, str(result)
    assert f"still running 3 s after SIGTERM: stubborn.service (pid(s) {pid})" in flat(result)
    assert "Left running, nothing was killed" in flat(result)
    assert "gpu_drain_force: true" in flat(result)
    # systemd's own stop timeout (the drop-in says SendSIGKILL=no) must not kill it either
    time.sleep(8)
    assert alive(ct, pid)


def test_force_sigkills_what_ignores_sigterm(ct):
    pid = int(sh(ct, "pgrep -f /opt/gpu-test/stubborn.py | head -1"))
    result = ct.run_playbook(
        DRAIN,
        extra_vars={
            "gpu_drain_units": ["stubborn"],
            "gpu_drain_grace_seconds": 3,
            "gpu_drain_force": True,
        },
    )
    assert result.rc == 0, str(result)
    assert not alive(ct, pid)
    assert "SIGKILLed (gpu_drain_force)" in flat(result)


def test_gpu_holders_stops_all_but_our_sglang_units(ct):
    # the lab has no GPU: plain files stand in for the device nodes a CUDA process keeps open
    sh(ct, "touch /dev/nvidia0 /dev/nvidia1 && systemctl start sglang@0")
    trainer = start_trainer(ct, hold="/dev/nvidia1")
    sh(
        ct,
        "HOLD_DEVICE=/dev/nvidia1 setsid -f python3 /opt/gpu-test/trainer.py /tmp/loose "
        "</dev/null >/dev/null 2>&1",
    )
    time.sleep(1)
    loose = int(sh(ct, "pgrep -f '^python3 /opt/gpu-test/trainer.py /tmp/loose'"))
    try:
        result = ct.run_playbook(
            DRAIN, extra_vars={"gpu_drain_gpu_holders": True, "gpu_drain_grace_seconds": 30}
        )
        assert result.rc == 0, str(result)
        assert not alive(ct, trainer) and not alive(ct, loose)
        assert checkpoint(ct)["complete"]
        assert sh(ct, "cat /tmp/loose/checkpoint.json | tail -1").endswith("}")
        assert active(ct, "sglang@0") == "active"
        assert "sglang@0.service" in flat(result)  # listed as kept
    finally:
        sh(ct, "systemctl stop sglang@0; rm -f /dev/nvidia0 /dev/nvidia1", check=False)


def test_infra_checks(ct):
    proc = ct.testinfra("tests/infra/test_gpu_drain.py")
    assert proc.returncode == 0, proc.stdout + proc.stderr
