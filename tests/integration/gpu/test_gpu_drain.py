"""gpu_facts and gpu_drain on a real lab container (vmid 240): no GPU, no NVML driver.

A stand-in trainer unit checkpoints for ~3 s after SIGTERM; the drain must wait for it. A
workload that ignores SIGTERM must be left running (and the play fail) unless force is set.
The lab has no NVIDIA driver, so the memory wait is skipped with that reason. The tests run in
order and share the container.

The GPU holders drain must spare our SGLang units. gpu_drain tells them apart by the systemd unit
that owns each holder's cgroup (plugins/module_utils/gpu_nvml.py unit_of_pid), matched against
gpu_drain_keep_units ("sglang@*"): so the unit here is the role's own. playbooks/serve.yml (the
sglang_serve role) installs sglang@.service, its sglang-instance launcher, the instance's
environment (CUDA_VISIBLE_DEVICES), command line and device drop-in, and starts sglang@gpu0 on the
fake /dev/nvidia0 it counted, as on a GPU host. Only the process behind it is not SGLang:
sglang_serve_launch_command runs fixtures/gpu_holder.py, whose forked child holds /dev/nvidia0 the
way SGLang's scheduler subprocess holds the GPU. Real SGLang cannot stand in: a bare container has
no pinned stack, and on the CPU (the lab's real instances, tests/integration/serve) it opens no
/dev/nvidia* at all, so it would not be a GPU holder for the drain to spare; a clone of the golden
template and a full SGLang start (about 40 CPU s) would buy nothing this test checks. What this
test claims about SGLang is only what the drain reads: the unit as the role installs it, and a
holder in that unit's cgroup that is not the main process.
"""

from __future__ import annotations

import ast
import json
import time
from pathlib import Path

import pytest

from tests.lablib import REPO, pct

pytestmark = pytest.mark.lab

VMID = 240
FIXTURES = Path(__file__).with_name("fixtures")
DRAIN = "playbooks/drain.yml"
PREFLIGHT = "playbooks/preflight.yml"
SERVE = "playbooks/serve.yml"
CKPT = "/srv/checkpoints/trainer"
FAKE_GPUS = "/dev/nvidia0 /dev/nvidia1"
OURS = "sglang@gpu0.service"  # the role's per-GPU instance on GPU 0
LOOSE = "/tmp/loose"  # a holder started from a shell, outside any service
# The sglang_serve role on the fake GPUs: everything as it deploys it, except the process the
# unit starts (module docstring). No argument check or readiness wait (both need SGLang itself)
# and no systemd-analyze score (a report; tests/integration/serve checks it).
SERVE_VARS = {
    "sglang_serve_enabled": True,
    "sglang_serve_gpus": [0],
    "sglang_serve_launch_command": ["/usr/bin/python3", "/opt/gpu-test/gpu_holder.py"],
    "sglang_serve_args_check": False,
    "sglang_serve_readiness_enabled": False,
    "sglang_serve_security_report_enabled": False,
}
# The infra check's own scan of /dev/nvidia* holders, read from its file (importing that module
# would bring its testinfra markers into this session).
INFRA = "tests/infra/test_gpu_drain.py"
HOLDERS = next(
    ast.literal_eval(node.value)
    for node in ast.parse((REPO / INFRA).read_text()).body
    if isinstance(node, ast.Assign)
    and [getattr(target, "id", None) for target in node.targets] == ["HOLDERS"]
)
# A failure bound for the waits below, not a timing check: they return as soon as the
# condition holds.
PATIENCE = 60


@pytest.fixture(scope="module")
def ct(lab_container):
    container = lab_container(VMID)
    container.exec("mkdir", "-p", "/opt/gpu-test", CKPT)
    for name, dest in [
        ("trainer.py", "/opt/gpu-test/trainer.py"),
        ("stubborn.py", "/opt/gpu-test/stubborn.py"),
        ("trainer.service", "/etc/systemd/system/trainer.service"),
        ("stubborn.service", "/etc/systemd/system/stubborn.service"),
        ("gpu_holder.py", "/opt/gpu-test/gpu_holder.py"),
    ]:
        pct("push", str(VMID), str(FIXTURES / name), dest, "--perms", "0644")
    container.exec("systemctl", "daemon-reload")
    return container


def sh(ct, script: str, check: bool = True) -> str:
    return ct.exec("sh", "-c", script, check=check).stdout.strip()


def active(ct, unit: str) -> str:
    return sh(ct, f"systemctl is-active {unit}", check=False)


def wait_for(what: str, probe):
    """probe()'s first truthy value, polled; PATIENCE only bounds a failure."""
    deadline = time.monotonic() + PATIENCE
    while not (value := probe()):
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not seen within {PATIENCE} s")
        time.sleep(0.2)
    return value


def start_trainer(ct, hold: str | None = None) -> int:
    # a running trainer writes its checkpoint on the way out: stop it before clearing
    sh(ct, "systemctl stop trainer")
    sh(ct, f"rm -f {CKPT}/checkpoint.json {CKPT}/checkpoint.json.tmp {CKPT}/started")
    env = f"HOLD_DEVICE={hold}\n" if hold else ""
    sh(ct, f"printf '{env}' > /etc/default/gpu-test-trainer && systemctl start trainer")
    # trainer.py writes its pid once its SIGTERM handler is set and HOLD_DEVICE is open
    pid = wait_for(
        "the trainer's pid", lambda: sh(ct, f"cat {CKPT}/started 2>/dev/null", check=False)
    )
    return int(pid)


def start_loose(ct) -> int:
    """A trainer started from a shell, outside any service, holding /dev/nvidia1."""
    sh(
        ct,
        f"rm -rf {LOOSE} && HOLD_DEVICE=/dev/nvidia1 setsid -f python3 /opt/gpu-test/trainer.py "
        f"{LOOSE} </dev/null >/dev/null 2>&1",
    )
    pid = wait_for(
        "the loose trainer's pid", lambda: sh(ct, f"cat {LOOSE}/started 2>/dev/null", check=False)
    )
    return int(pid)


def holders(ct) -> list[dict]:
    """Every process holding /dev/nvidia* and its unit, read as the infra check reads them."""
    return json.loads(ct.exec("python3", "-c", HOLDERS).stdout)


def main_pid(ct, unit: str) -> int:
    return int(sh(ct, f"systemctl show -p MainPID --value {unit}"))


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
    # Restart=always must not bring it back after a deliberate stop: dead, not waiting to
    # auto-restart, and no job of systemd's queued for it
    assert sh(ct, "systemctl show -p ActiveState -p SubState -p Job --value trainer").split() == [
        "inactive", "dead"], "trainer is queued to come back"
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
    sh(ct, "rm -f /run/gpu-test-stubborn.started; systemctl start stubborn")
    pid = int(sh(ct, "systemctl show -p MainPID --value stubborn"))
    # a SIGTERM before its handler is set would end it: the drain starts once it ignores them
    wait_for("stubborn to ignore SIGTERM",
             lambda: sh(ct, "cat /run/gpu-test-stubborn.started 2>/dev/null", check=False)
             == str(pid))
    result = ct.run_playbook(
        DRAIN, extra_vars={"gpu_drain_units": ["stubborn"], "gpu_drain_grace_seconds": 3}
    )
    assert result.rc != 0, str(result)
    assert f"still running 3 s after SIGTERM: stubborn.service (pid(s) {pid})" in flat(result)
    assert "Left running, nothing was killed" in flat(result)
    assert "gpu_drain_force: true" in flat(result)
    # systemd's own stop timeout (the drop-in says SendSIGKILL=no) must not kill it either: once
    # no stop job of systemd's is left for it, nothing will
    wait_for("systemd's stop job for stubborn to end",
             lambda: sh(ct, "systemctl show -p Job --value stubborn") == "")
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


@pytest.fixture(scope="module")
def ours(ct):
    """Fake /dev/nvidia0 and /dev/nvidia1 (the lab has no GPU: plain files stand in for the device
    nodes a CUDA process keeps open) and the role's own sglang@gpu0 on them, its child holding
    /dev/nvidia0 (module docstring). Kept until the infra checks have run, then removed."""
    sh(ct, f"touch {FAKE_GPUS}")
    try:
        result = ct.run_playbook(SERVE, extra_vars=SERVE_VARS)
        assert result.rc == 0, str(result)
        main = main_pid(ct, OURS)
        # started through the role's sglang-instance launcher, from the args file it wrote
        cmdline = sh(ct, f"tr '\\0' ' ' < /proc/{main}/cmdline")
        assert cmdline.endswith("--config /etc/sglang/instances/gpu0.yaml"), cmdline
        held = wait_for(
            f"{OURS} holding /dev/nvidia0", lambda: [h for h in holders(ct) if h["unit"] == OURS]
        )
        assert [h["devices"] for h in held] == [["/dev/nvidia0"]], held
        assert held[0]["pid"] != main, held  # a child of the unit, as SGLang's scheduler is
        yield {"main": main, "holder": held[0]["pid"]}
    finally:
        sh(ct, f"systemctl stop {OURS}; rm -f {FAKE_GPUS}", check=False)


def test_gpu_holders_stops_all_but_our_sglang_units(ct, ours):
    trainer = start_trainer(ct, hold="/dev/nvidia1")
    loose = start_loose(ct)
    result = ct.run_playbook(
        DRAIN, extra_vars={"gpu_drain_gpu_holders": True, "gpu_drain_grace_seconds": 30}
    )
    assert result.rc == 0, str(result)
    assert not alive(ct, trainer) and not alive(ct, loose)
    assert checkpoint(ct)["complete"]
    assert sh(ct, f"cat {LOOSE}/checkpoint.json | tail -1").endswith("}")
    # ours: not signalled (the same processes run), still holding its GPU, listed as kept
    assert active(ct, OURS) == "active"
    assert main_pid(ct, OURS) == ours["main"]
    assert [h["pid"] for h in holders(ct) if h["unit"] == OURS] == [ours["holder"]]
    assert f"kept: - {OURS}" in flat(result), str(result)


def test_infra_checks_pass_after_the_drain(ct, ours):
    # what the infra check reads: our unit still holds its GPU, nothing else holds any
    assert [(h["unit"], h["devices"]) for h in holders(ct)] == [(OURS, ["/dev/nvidia0"])]
    proc = ct.testinfra(INFRA)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # a check skipped (its deploy record says "skipped") exits 0 too: all three ran and passed
    assert "3 passed" in proc.stdout and "skipped" not in proc.stdout, proc.stdout + proc.stderr


def test_infra_check_fails_on_a_holder_left_running(ct, ours):
    loose = start_loose(ct)
    try:
        proc = ct.testinfra(INFRA, extra=["-k", "test_only_our_units_hold_the_gpus"])
        assert proc.returncode == 1, proc.stdout + proc.stderr
        assert "1 failed" in proc.stdout and "passed" not in proc.stdout, proc.stdout
        assert "still holding the GPUs after the drain" in proc.stdout, proc.stdout
        assert f"'pid': {loose}," in proc.stdout, proc.stdout
        assert f"'pid': {ours['holder']}," not in proc.stdout, proc.stdout  # ours is kept
    finally:
        sh(ct, f"kill -KILL {loose}", check=False)
