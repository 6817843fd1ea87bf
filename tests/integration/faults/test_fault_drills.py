"""Fault drills on a real lab container: the stack install of role `sglang` under faults.

A small lock (tests/integration/faults/locks: five small pure-Python wheels, pinned with their
sha256) goes through the same roles and play as the real stack (playbooks/sglang.yml), selected by
variables only. /opt/sglang (venv parent: releases, the venv link, the install lock) is a 96 MiB
tmpfs on the host, bind-mounted into the container, so the disk can be filled for real.

After each fault: a rerun converges, a second rerun reports changed=0, and the venv that served
before the fault still imports (it is current, or kept as `previous`).
"""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest

from tests.lablib import REPO, VENV_BIN, lab_env, lab_root

pytestmark = pytest.mark.lab

VMID = 285
# 10.0.3.<vmid> does not exist above 255: this suite's range (285-299) uses .<vmid - 100>.
ADDRESS = f"10.0.3.{VMID - 100}"
LOCKS = REPO / "tests" / "integration" / "faults" / "locks"
PLAYBOOK = "playbooks/sglang.yml"
PREFIX = "/opt/sglang"
VENV = f"{PREFIX}/venv"
RELEASES = f"{PREFIX}/venvs"
LOCK = f"{PREFIX}/.sglang-lxc-install.lock"
TMPFS_MB = 96


def lock_pins(version: str) -> dict[str, str]:
    pins = {}
    for line in (LOCKS / f"sglang-{version}.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            pin, _, digest = line.partition("# sha256:")
            pins[pin.strip()] = digest.strip()
    return pins


def sh(ct, command: str, check: bool = True) -> str:
    return ct.exec("sh", "-c", command, check=check).stdout.strip()


def venv_versions(ct, venv: str = VENV) -> dict[str, str]:
    out = sh(ct, f"{venv}/bin/python -c 'import json, idna, six, nest_asyncio, importlib.metadata as m; "
                 "print(json.dumps({d: m.version(d) for d in (\"idna\", \"sglang\", \"six\")}))'")
    return json.loads(out)


@pytest.fixture(scope="module")
def controller_wheelhouse(tmp_path_factory) -> Path:
    """A wheelhouse of this suite's own, so that corrupting it touches no shared set."""
    return tmp_path_factory.mktemp("faults-wheelhouse")


@pytest.fixture(scope="module")
def ct(lab_container, controller_wheelhouse):
    host_dir = lab_root() / "data" / f"ct{VMID}-opt"
    subprocess.run(["umount", str(host_dir)], capture_output=True, check=False)
    host_dir.mkdir(parents=True, exist_ok=True)
    subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={TMPFS_MB}m", "tmpfs", str(host_dir)],
                   check=True)
    try:
        ct = lab_container(
            VMID,
            ip=f"{ADDRESS}/24",
            mounts=[
                {"host_path": str(lab_root() / "data" / f"ct{VMID}" / "models"), "path": "/srv/models"},
                {"host_path": str(host_dir), "path": PREFIX},
            ],
        )
        ct.drill_vars = lambda version="0.1.4", **extra: {
            "sglang_lock_dir": str(LOCKS),
            "sglang_version": version,
            "sglang_wheelhouse_dir": str(controller_wheelhouse),
            "sglang_download_extra_args": ["--no-deps"],
            "sglang_stack_verify_imports": ["idna", "six", "nest_asyncio"],
            "sglang_kernel_from_source": False,
            **extra,
        }
        yield ct
    finally:
        subprocess.run([str(REPO / "tests/standins/pct"), "stop", str(VMID)],
                       capture_output=True, env=lab_env(), check=False)
        subprocess.run(["umount", str(host_dir)], capture_output=True, check=False)
        try:
            host_dir.rmdir()
        except OSError:
            pass


def converge(ct, version: str = "0.1.4", **extra):
    return ct.run_playbook(PLAYBOOK, extra_vars=ct.drill_vars(version, **extra))


def assert_recovers(ct, version: str, old_venv: str | None = None) -> None:
    """A rerun converges, the next reports changed=0, the old venv (when given) still imports."""
    result = converge(ct, version)
    assert result.rc == 0, str(result)
    again = converge(ct, version)
    assert again.rc == 0, str(again)
    assert again.changed == 0, str(again)
    pins = lock_pins(version)
    assert venv_versions(ct)["sglang"] == pins_version(pins, "sglang")
    assert sh(ct, f"cat {VENV}/.sglang-lxc-release.json")  # the completion marker
    if old_venv:
        assert venv_versions(ct, old_venv)["idna"]


def pins_version(pins: dict[str, str], name: str) -> str:
    return next(p.split("==")[1] for p in pins if p.startswith(name + "=="))


def start_playbook(ct, extra_vars: dict) -> subprocess.Popen:
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(ct.inventory), str(REPO / PLAYBOOK),
           "--limit", ct.name, "-e", json.dumps(extra_vars)]
    return subprocess.Popen(cmd, cwd=REPO, env=lab_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, start_new_session=True)


def hold_lock(ct, seconds: int) -> None:
    """An install left running by a dead controller, as the target sees it: a process holding
    the per-target lock."""
    sh(ct, f"mkdir -p {PREFIX} && (setsid flock {LOCK} sleep {seconds} >/dev/null 2>&1 &) ; sleep 0.5")


def drop_previous(ct) -> None:
    """Remove the release kept for rollback, so that the next switch to it installs afresh."""
    sh(ct, f"p=$(readlink -f {RELEASES}/previous) && [ -n \"$p\" ] && rm -rf \"$p\"; rm -f {RELEASES}/previous")


def wait_for(predicate, timeout: float, step: float = 0.5) -> bool:
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if predicate():
            return True
        time.sleep(step)
    return False


def test_converge_builds_a_release_and_switches_the_link(ct):
    start = time.monotonic()
    result = converge(ct)
    assert result.rc == 0, str(result)
    print(f"first install: {time.monotonic() - start:.1f} s")
    link = sh(ct, f"readlink {VENV}")
    assert link.startswith("venvs/0.1.4-"), link
    assert venv_versions(ct) == {"idna": "3.10", "sglang": "0.1.4", "six": "1.17.0"}
    # the target installed with hash checking on, from a file carrying the lock's sha256
    reqs = sh(ct, "cat /var/cache/sglang-lxc/wheelhouse/sglang-0.1.4/requirements-*.txt")
    assert "idna==3.10 --hash=sha256:" + lock_pins("0.1.4")["idna==3.10"] in reqs
    again = converge(ct)
    assert again.rc == 0 and again.changed == 0, str(again)
    check = ct.run_playbook(PLAYBOOK, extra_vars=ct.drill_vars("0.1.5"), check=True)
    assert check.rc == 0, str(check)
    assert sh(ct, f"readlink {VENV}") == link  # check mode switched nothing


def test_truncated_controller_wheel_is_named_and_fetched_again(ct, controller_wheelhouse):
    wheel = next((controller_wheelhouse / "sglang-0.1.4").glob("idna-3.10-*.whl"))
    data = wheel.read_bytes()
    wheel.write_bytes(data[: len(data) // 2])
    start = time.monotonic()
    result = converge(ct)
    print(f"truncated wheel drill: {time.monotonic() - start:.1f} s")
    assert result.rc == 0, str(result)
    assert str(wheel) in result.output  # the message names the controller's copy
    assert "does not match the lock's sha256" in result.output
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == lock_pins("0.1.4")["idna==3.10"]
    assert_recovers(ct, "0.1.4")


def test_a_held_install_lock_is_waited_for_or_reported(ct):
    old = sh(ct, f"readlink -f {VENV}")
    hold_lock(ct, 25)
    start = time.monotonic()
    result = converge(ct, "0.1.5", sglang_stack_lock_wait=3)
    assert result.rc != 0, str(result)
    assert f"still holds {LOCK}" in result.output, str(result)
    assert sh(ct, f"readlink -f {VENV}") == old  # nothing switched
    result = converge(ct, "0.1.5", sglang_stack_lock_wait=120)
    waited = time.monotonic() - start
    print(f"install waited for the held lock: {waited:.1f} s in all")
    assert result.rc == 0, str(result)
    assert waited >= 20  # it waited for the holder instead of overlapping it
    assert venv_versions(ct)["sglang"] == "0.1.5"
    assert sh(ct, f"readlink -f {RELEASES}/previous") == old
    assert_recovers(ct, "0.1.5", old_venv=f"{RELEASES}/previous")


def test_kill_9_of_pip_and_the_controller_mid_install(ct):
    drop_previous(ct)
    old = sh(ct, f"readlink -f {VENV}")
    target = "0.1.4" if venv_versions(ct)["sglang"] == "0.1.5" else "0.1.5"
    # Kill pip (and its parent, the module) as soon as it has unpacked its first package,
    # while the controller's ansible-playbook is killed too.
    watcher = (
        f"for i in $(seq 1 3000); do "
        f"  if ls -d {RELEASES}/{target}-*/lib/python3*/site-packages/*.dist-info >/dev/null 2>&1; then "
        f"    pid=$(pgrep -f 'pip install --no-index' | head -n1); "
        f"    [ -n \"$pid\" ] && {{ ppid=$(ps -o ppid= -p $pid); kill -9 $pid $ppid; echo killed; exit 0; }}; "
        f"  fi; sleep 0.01; done; echo missed"
    )
    ct.exec("sh", "-c", f"setsid sh -c '{watcher}' > /tmp/watcher.log 2>&1 < /dev/null &")
    start = time.monotonic()
    proc = start_playbook(ct, ct.drill_vars(target))
    assert wait_for(lambda: sh(ct, "cat /tmp/watcher.log", check=False) != "", 120, 0.2)
    os.killpg(proc.pid, signal.SIGKILL)
    proc.communicate()
    print(f"kill -9 drill: killed after {time.monotonic() - start:.1f} s")
    assert sh(ct, "cat /tmp/watcher.log") == "killed"
    assert sh(ct, f"readlink -f {VENV}") == old  # the half-installed release is not current
    half = sh(ct, f"ls -d {RELEASES}/{target}-*")
    assert sh(ct, f"test -e {half}/.sglang-lxc-release.json && echo marked || echo unmarked") == "unmarked"
    result = converge(ct, target)
    assert result.rc == 0, str(result)
    assert "removed the half-installed release" in result.output
    assert_recovers(ct, target, old_venv=f"{RELEASES}/previous")


def test_reboot_mid_role_is_unreachable_within_a_minute(ct):
    old = sh(ct, f"readlink -f {VENV}")
    hold_lock(ct, 600)  # the install task blocks on the lock: a long task in flight
    proc = start_playbook(ct, ct.drill_vars("0.1.5", sglang_stack_lock_wait=600))
    assert wait_for(lambda: _task_started(proc), 180, 1)
    time.sleep(3)
    rebooted = time.monotonic()
    subprocess.run([str(REPO / "tests/standins/pct"), "reboot", str(VMID)], env=lab_env(),
                   capture_output=True, check=True, timeout=120)
    out, _ = proc.communicate(timeout=300)
    unreachable_after = time.monotonic() - rebooted
    print(f"reboot drill: run ended {unreachable_after:.1f} s after pct reboot, rc={proc.returncode}")
    assert "UNREACHABLE" in out or "unreachable=1" in out, out[-3000:]
    assert unreachable_after < 120, out[-3000:]
    assert wait_for(lambda: ct.exec("true", check=False).returncode == 0, 120, 2)
    assert_recovers(ct, "0.1.5", old_venv=old)


_OUTPUT: dict[int, str] = {}


def _task_started(proc: subprocess.Popen) -> bool:
    """Read the playbook's output so far (non-blocking) and say whether the install task began."""
    import fcntl as _fcntl

    fd = proc.stdout.fileno()
    _fcntl.fcntl(fd, _fcntl.F_SETFL, _fcntl.fcntl(fd, _fcntl.F_GETFL) | os.O_NONBLOCK)
    try:
        chunk = proc.stdout.read() or ""
    except (BlockingIOError, TypeError):
        chunk = ""
    _OUTPUT[proc.pid] = _OUTPUT.get(proc.pid, "") + chunk
    return "Install the stack aside and switch" in _OUTPUT[proc.pid]


def test_disk_full_mid_upgrade_names_the_filesystem(ct):
    drop_previous(ct)
    old = sh(ct, f"readlink -f {VENV}")
    before = venv_versions(ct)
    target = "0.1.4" if before["sglang"] == "0.1.5" else "0.1.5"
    # leave 12 MiB: the free-space check (64 MiB for a venv with pip) refuses before any change
    sh(ct, f"fallocate -l $(( $(df --output=avail -B1 {PREFIX} | tail -n1) - 12*1024*1024 )) {PREFIX}/filler")
    result = converge(ct, target)
    assert result.rc != 0, str(result)
    assert f"no space left on {PREFIX} (" in result.output, str(result)
    assert "needed" in result.output
    assert sh(ct, f"readlink -f {VENV}") == old
    # with the check off, the disk runs full while the venv is being made: ENOSPC, named
    start = time.monotonic()
    result = converge(ct, target, sglang_stack_space_factor=0, sglang_stack_space_overhead_mb=0)
    print(f"disk full drill: {time.monotonic() - start:.1f} s")
    assert result.rc != 0, str(result)
    assert f"no space left on {PREFIX} (" in result.output, str(result)
    assert "did not download" not in result.output
    assert sh(ct, f"readlink -f {VENV}") == old  # the old venv still serves
    assert venv_versions(ct) == before
    assert sh(ct, f"ls -d {RELEASES}/{target}-* 2>/dev/null || true") == ""  # partial removed
    sh(ct, f"rm -f {PREFIX}/filler")
    assert_recovers(ct, target, old_venv=old)


def test_network_cut_during_a_task_is_survived(ct):
    veth = subprocess.run(["lxc-info", "-n", str(VMID), "-H", "-c", "lxc.net.0.veth.pair"],
                          capture_output=True, text=True).stdout.strip()
    if not veth:
        info = subprocess.run(["lxc-info", "-n", str(VMID)], capture_output=True, text=True).stdout
        veth = next((ln.split()[-1] for ln in info.splitlines() if ln.startswith("Link:")), "")
    assert veth, "no host veth for the container"
    target = "0.1.4" if venv_versions(ct)["sglang"] == "0.1.5" else "0.1.5"
    hold_lock(ct, 40)
    proc = start_playbook(ct, ct.drill_vars(target, sglang_stack_lock_wait=120))
    assert wait_for(lambda: _task_started(proc), 180, 1)
    subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    time.sleep(25)
    subprocess.run(["ip", "link", "set", veth, "up"], check=True)
    out, _ = proc.communicate(timeout=300)
    out = _OUTPUT.get(proc.pid, "") + out
    assert proc.returncode == 0, out[-3000:]
    assert venv_versions(ct)["sglang"] == target
    assert_recovers(ct, target, old_venv=f"{RELEASES}/previous")
