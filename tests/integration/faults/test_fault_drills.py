"""Fault drills on a real lab container: the stack install of role `sglang` under faults.

A small lock (tests/integration/faults/locks: five small pure-Python wheels, pinned with their
sha256) goes through the same roles and play as the real stack (playbooks/sglang.yml), selected by
variables only. /opt/sglang (venv parent: releases, the venv link, the install lock) is a 96 MiB
tmpfs on the host, bind-mounted into the container, so the disk can be filled for real. The wheels
reach the container through a node cache of this suite's own (read-only mount) and uv installs
them, with its cache on the node (read-write mount).

After each fault: a rerun converges, a second rerun reports changed=0 (where the drill's own run
ended converged, that one rerun), and the venv that served before the fault still imports (it is
current, or kept as `previous`).
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import signal
import subprocess
import threading
import time
from pathlib import Path

import pytest

from tests.lablib import REPO, VENV_BIN, lab_env, lab_root, node_cache_mounts, wait_for_ssh

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
# The node cache's wheel folder as the container sees it (read-only mount).
NODE_WHEELS = "/var/cache/sglang-lxc/node/wheelhouse"
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
    code = ("import json, idna, six, nest_asyncio, importlib.metadata as m; "
            "print(json.dumps({d: m.version(d) for d in (\"idna\", \"sglang\", \"six\")}))")
    out = sh(ct, f"{venv}/bin/python -c '{code}'")
    return json.loads(out)


@pytest.fixture(scope="module")
def controller_wheelhouse(tmp_path_factory) -> Path:
    """A wheelhouse of this suite's own, so that corrupting it touches no shared set."""
    return tmp_path_factory.mktemp("faults-wheelhouse")


@pytest.fixture(scope="module")
def node_cache(tmp_path_factory) -> tuple[Path, Path]:
    """This suite's own node cache (wheels, uv's cache): the drills corrupt nothing shared."""
    root = tmp_path_factory.mktemp("faults-node")
    (root / "wheels").mkdir()
    (root / "uv").mkdir()
    return root / "wheels", root / "uv"


@pytest.fixture(scope="module")
def ct(lab_container, controller_wheelhouse, node_cache):
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
                {"host_path": str(lab_root() / "data" / f"ct{VMID}" / "models"),
                 "path": "/srv/models"},
                {"host_path": str(host_dir), "path": PREFIX},
                *node_cache_mounts(*node_cache),
            ],
        )
        ct.drill_vars = lambda version="0.1.4", **extra: {
            "sglang_lock_dir": str(LOCKS),
            "sglang_version": version,
            "sglang_wheelhouse_dir": str(controller_wheelhouse),
            "sglang_download_extra_args": ["--no-deps"],
            "sglang_stack_verify_imports": ["idna", "six", "nest_asyncio"],
            "sglang_kernel_from_source": False,
            # the drills fill the disk with the venv's own files: uv copies them from its cache
            # (the lab's symlink mode would put no file bytes on the release's filesystem)
            "sglang_uv_link_mode": "copy",
            "sglang_lxc_node_wheelhouse": str(node_cache[0]),
            "sglang_lxc_node_uv_cache": str(node_cache[1]),
            **extra,
        }
        yield ct
    finally:
        subprocess.run([str(REPO / "tests/standins/pct"), "stop", str(VMID)],
                       capture_output=True, env=lab_env(), check=False)
        subprocess.run(["umount", str(host_dir)], capture_output=True, check=False)
        with contextlib.suppress(OSError):
            host_dir.rmdir()


def converge(ct, version: str = "0.1.4", **extra):
    return ct.run_playbook(PLAYBOOK, extra_vars=ct.drill_vars(version, **extra))


def assert_recovers(ct, version: str, old_venv: str | None = None, converged: bool = False
                    ) -> None:
    """A rerun converges, the next reports changed=0, the old venv (when given) still imports.
    ``converged``: the drill's own run already ended converged, so one rerun, changed=0, is the
    proof (a rerun before it would only repeat it)."""
    if not converged:
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


class Run:
    """ansible-playbook in the background (its own session), its output read by a thread."""

    def __init__(self, ct, extra_vars: dict, artifacts: Path | None = None):
        cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(ct.inventory), str(REPO / PLAYBOOK),
               "--limit", ct.name, "-e", json.dumps(extra_vars)]
        env = lab_env(**({"SGLANG_LXC_ARTIFACTS": str(artifacts)} if artifacts else {}))
        self.proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                                     stderr=subprocess.STDOUT, text=True, start_new_session=True)
        self.lines: list[str] = []
        self.reader = threading.Thread(target=self._read, daemon=True)
        self.reader.start()

    def _read(self) -> None:
        for line in self.proc.stdout:
            self.lines.append(line)

    @property
    def output(self) -> str:
        return "".join(self.lines)

    def install_task_started(self) -> bool:
        return "Install the stack aside and switch" in self.output

    def wait(self, timeout: float) -> int:
        rc = self.proc.wait(timeout=timeout)
        self.reader.join(timeout=10)
        return rc

    def kill(self) -> None:
        os.killpg(self.proc.pid, signal.SIGKILL)
        self.wait(30)


# returns once some process holds the lock (a try to take it fails), however long its start took
UNTIL_HELD = f"until ! flock -n {LOCK} true; do sleep 0.1; done"


def hold_lock(ct, seconds: int = 600) -> None:
    """An install left running by a dead controller, as the target sees it: a process group
    holding the per-target lock (flock(2), as the module takes it)."""
    sh(ct, f"mkdir -p {PREFIX} && setsid flock {LOCK} sleep {seconds} >/dev/null 2>&1 </dev/null "
           f"& echo $! > /tmp/lock-holder.pid; {UNTIL_HELD}")


def release_lock(ct) -> None:
    sh(ct, "kill -9 -$(cat /tmp/lock-holder.pid)")  # the group: flock and its sleep


def drop_previous(ct) -> None:
    """Remove the release kept for rollback, so that the next switch to it installs afresh."""
    sh(ct, f"p=$(readlink -f {RELEASES}/previous) && [ -n \"$p\" ] && rm -rf \"$p\"; "
           f"rm -f {RELEASES}/previous")


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
    reqs = sh(ct, f"cat {NODE_WHEELS}/sglang-0.1.4/requirements-*.txt")
    assert "idna==3.10 --hash=sha256:" + lock_pins("0.1.4")["idna==3.10"] in reqs
    # the wheels came through the node's folder, read-only in the container; uv installed them
    assert "Read-only file system" in sh(ct, f"touch {NODE_WHEELS}/x 2>&1 || true")
    assert json.loads(sh(ct, f"cat {VENV}/.sglang-lxc-release.json"))["installer"] == "uv"
    again = converge(ct)
    assert again.rc == 0 and again.changed == 0, str(again)
    check = ct.run_playbook(PLAYBOOK, extra_vars=ct.drill_vars("0.1.5"), check=True)
    assert check.rc == 0, str(check)
    assert sh(ct, f"readlink {VENV}") == link  # check mode switched nothing


def test_truncated_controller_wheel_is_named_and_fetched_again(ct, controller_wheelhouse):
    wheel = next((controller_wheelhouse / "sglang-0.1.4").glob("idna-3.10-*.whl"))
    data = wheel.read_bytes()
    wheel.write_bytes(data[: len(data) // 2])
    # the stack path runs only on drift: take six out of the live venv, as a stray pip would
    sh(ct, f"rm -rf {VENV}/lib/python3*/site-packages/six-*.dist-info")
    live = sh(ct, f"readlink -f {VENV}")
    start = time.monotonic()
    result = converge(ct)
    print(f"truncated wheel drill: {time.monotonic() - start:.1f} s")
    assert result.rc == 0, str(result)
    assert str(wheel) in result.output  # the message names the controller's copy
    assert "does not match the lock's sha256" in result.output
    assert hashlib.sha256(wheel.read_bytes()).hexdigest() == lock_pins("0.1.4")["idna==3.10"]
    assert "1 missing (six==1.17.0)" in result.output  # what the probe found
    # repaired aside: a new folder for the same release, the damaged one kept as previous
    assert sh(ct, f"readlink -f {VENV}") != live
    assert sh(ct, f"readlink -f {RELEASES}/previous") == live
    assert_recovers(ct, "0.1.4")


def site_packages_rm(ct, release: str, dist: str) -> None:
    """Take one distribution's metadata out of a release, as a stray `pip uninstall` would."""
    sh(ct, f"rm -rf {release}/lib/python3*/site-packages/{dist}-*.dist-info")


def test_a_repair_checks_the_kept_copy_before_switching_to_it(ct):
    """Issue 21: the kept `previous` is an earlier copy of the current release (a repair builds
    aside), marked complete. Break the current release, break `previous` differently, run once:
    the run must not switch to `previous` on the word of its marker, and the next probe finds
    nothing (the next run reports changed=0)."""
    version = venv_versions(ct)["sglang"]
    live = sh(ct, f"readlink -f {VENV}")
    kept = sh(ct, f"readlink -f {RELEASES}/previous", check=False)
    if not kept or not live.startswith(kept + "."):
        # make `previous` an earlier copy of this release: damage it, and a repair builds aside
        # (the truncated-wheel drill before this one leaves that state: then nothing runs here)
        site_packages_rm(ct, live, "six")
        assert converge(ct, version).rc == 0
        kept, live = live, sh(ct, f"readlink -f {VENV}")
    site_packages_rm(ct, live, "idna")
    site_packages_rm(ct, kept, "nest_asyncio")
    start = time.monotonic()
    result = converge(ct, version)
    print(f"kept-copy drill: {time.monotonic() - start:.1f} s")
    assert result.rc == 0, str(result)
    assert "1 missing (idna==" in result.output  # what the probe found
    now = sh(ct, f"readlink -f {VENV}")
    assert now not in (live, kept) and now.startswith(kept + "."), now  # built anew aside
    assert f"the kept release {kept} failed its check" in " ".join(result.output.split())
    assert sh(ct, f"test -e {kept} && echo kept || echo removed") == "removed"
    again = converge(ct, version)
    assert again.rc == 0 and again.changed == 0, str(again)
    assert "Say what would change in the stack" not in again.output  # the probe found nothing
    assert venv_versions(ct)["sglang"] == version


def test_a_held_install_lock_is_waited_for_or_reported(ct):
    old = sh(ct, f"readlink -f {VENV}")
    hold_lock(ct)
    result = converge(ct, "0.1.5", sglang_stack_lock_wait=3)
    assert result.rc != 0, str(result)
    assert f"still holds {LOCK}" in result.output, str(result)
    assert "held by pid " in result.output and "sleep 600" in result.output  # the holder
    assert sh(ct, f"readlink -f {VENV}") == old  # nothing switched
    run = Run(ct, ct.drill_vars("0.1.5", sglang_stack_lock_wait=300))
    assert wait_for(run.install_task_started, 300, 1), run.output[-3000:]
    # the install's module has the lock file open, the holder still holds it: it waits
    assert wait_for(lambda: module_at_lock(ct), 300, 0.5), run.output[-3000:]
    assert run.proc.poll() is None  # it waits for the holder instead of overlapping it
    assert sh(ct, f"readlink -f {VENV}") == old
    released = time.monotonic()
    release_lock(ct)
    rc = run.wait(300)
    print(f"lock drill: the install ended {time.monotonic() - released:.1f} s after the release")
    assert rc == 0, run.output[-3000:]
    assert venv_versions(ct)["sglang"] == "0.1.5"
    assert sh(ct, f"readlink -f {RELEASES}/previous") == old
    assert_recovers(ct, "0.1.5", old_venv=f"{RELEASES}/previous", converged=True)


HOLD_FLAG = "/tmp/sglang-lxc-drill-hold"
HELD = "/tmp/sglang-lxc-drill-held"
SITE_BACKUP = "/tmp/sglang-lxc-drill-sitecustomize"


def hold_pythons_in(ct, prefix: str) -> str:
    """From now on every Python that starts with its sys.prefix under ``prefix`` (a venv made
    there) appends its pid to HELD and blocks until it is killed: a hook in sitecustomize of the
    container's python3, which a venv's Python reads too (-I keeps site). Returns the file
    changed, for ``unhold``."""
    site = sh(ct, "/usr/bin/python3 -c 'import sysconfig; print(sysconfig.get_path(\"stdlib\"))'")
    site += "/sitecustomize.py"
    hook = (
        "\n# sglang-lxc fault drill (tests/integration/faults): taken out after the drill\n"
        "import os as _os, sys as _sys, time as _time\n"
        f"if _sys.prefix.startswith({prefix!r}) and _os.path.exists({HOLD_FLAG!r}):\n"
        f"    with open({HELD!r}, 'a') as _held:\n"
        "        _held.write('%d\\n' % _os.getpid())\n"
        "    while True:\n"
        "        _time.sleep(3600)\n"
    )
    sh(ct, f"rm -f {HELD} {SITE_BACKUP}; if [ -e {site} ]; then cp -L {site} {SITE_BACKUP}; fi; "
           f"cat >> {site} <<'EOF'\n{hook}EOF\ntouch {HOLD_FLAG}")
    return site


def unhold(ct, site: str) -> None:
    """The hook out (the file as it was), and every Python it held killed."""
    sh(ct, f"rm -f {HOLD_FLAG}; if [ -e {SITE_BACKUP} ]; then cat {SITE_BACKUP} > {site}; "
           f"else rm -f {site}; fi; for pid in $(cat {HELD} 2>/dev/null); do "
           "kill -s KILL $pid 2>/dev/null; done; true")


def test_kill_9_of_the_installer_and_the_controller_mid_install(ct):
    drop_previous(ct)
    old = sh(ct, f"readlink -f {VENV}")
    target = "0.1.4" if venv_versions(ct)["sglang"] == "0.1.5" else "0.1.5"
    # The install is held mid-way: the first Python that runs in the new release (uv's look at
    # its interpreter, its bytecode compile, or the release's check: whichever comes first)
    # blocks, its folder made and no completion marker written. Then kill -9: the controller's
    # ansible-playbook first (nothing of it sees the target's processes end), then the module and
    # the step it waits for, with everything of that step (the module starts each in a session
    # of its own: uv and its Pythons, or the check's Python).
    site = hold_pythons_in(ct, f"{RELEASES}/{target}-")
    try:
        run = Run(ct, ct.drill_vars(target))
        assert wait_for(lambda: sh(ct, f"cat {HELD}", check=False) != "", 300, 0.5), \
            run.output[-3000:]
        held = sh(ct, f"cat {HELD}").split()
        sid, module = sh(ct, f"sid=$(ps -o sid= -p {held[0]}); "
                             "echo $sid $(ps -o ppid= -p $sid)").split()
        step, module_args = (sh(ct, f"ps -o args= -p {pid}") for pid in (sid, module))
        print(f"kill -9 drill: held {step[:200]!r}, module pid {module}: {module_args[:100]!r}")
        assert "python" in module_args  # the module: Ansible's Python
        run.kill()
        # in this order: the module can do nothing once its kill is sent (no removal of the
        # release it was building); an operand already gone is no miss, the check below is
        sh(ct, f"kill -s KILL -- {module} -{sid} {' '.join(held)} 2>&1; true")
        # all gone (the step's session, the module): nothing of the install is left running
        assert wait_for(lambda: sh(ct, f"ps -o pid= -s {sid}; ps -o pid= -p {module}; true") == "",
                        60, 0.5)
    finally:
        unhold(ct, site)
    assert sh(ct, f"readlink -f {VENV}") == old  # the half-installed release is not current
    half = sh(ct, f"ls -d {RELEASES}/{target}-*")
    marked = sh(ct, f"test -e {half}/.sglang-lxc-release.json && echo marked || echo unmarked")
    assert marked == "unmarked"
    result = converge(ct, target)
    assert result.rc == 0, str(result)
    assert "removed the half-installed release" in result.output
    # the probe did not take the unmarked release for current: it reported drift
    assert "Say what would change in the stack" in result.output
    assert_recovers(ct, target, old_venv=f"{RELEASES}/previous")


def module_at_lock(ct) -> bool:
    """A Python (the install's module) has the install lock open: it waits for it."""
    out = sh(ct, f"for p in /proc/[0-9]*; do if ls -l $p/fd 2>/dev/null | grep -q -- '{LOCK}'; "
                 "then tr '\\0' ' ' < $p/cmdline; echo; fi; done", check=False)
    return any("python" in line for line in out.splitlines())


def test_reboot_mid_role_fails_the_run_saying_why_and_keeps_the_old_venv(ct, tmp_path):
    old = sh(ct, f"readlink -f {VENV}")
    target = "0.1.4" if venv_versions(ct)["sglang"] == "0.1.5" else "0.1.5"
    # The install task blocks on the lock, held by a process that ignores SIGTERM: it outlives
    # the shutdown's SIGTERM, so the task is still in flight when the container goes down.
    sh(ct, f"setsid flock {LOCK} sh -c 'trap \"\" TERM HUP INT; sleep 600' >/dev/null 2>&1 "
           f"</dev/null & {UNTIL_HELD}")
    run = Run(ct, ct.drill_vars(target, sglang_stack_lock_wait=600), artifacts=tmp_path)
    assert wait_for(run.install_task_started, 300, 1), run.output[-3000:]
    assert wait_for(lambda: module_at_lock(ct), 300, 0.5), run.output[-3000:]  # in flight
    rebooted = time.monotonic()
    # the lock holder outlives the shutdown's SIGTERM: the shutdown ends in a kill after pct's
    # --timeout (60 s by default; 10 here, as the drill is about the run's end, not the wait)
    subprocess.run([str(REPO / "tests/standins/pct"), "reboot", str(VMID), "--timeout", "10"],
                   env=lab_env(), capture_output=True, check=True, timeout=300)
    try:
        rc = run.wait(300)  # a deadline only, for a run that would hang
    except subprocess.TimeoutExpired:
        pytest.fail("the run did not end after the reboot: " + run.output[-3000:])
    out = run.output
    ended_after = time.monotonic() - rebooted
    print(f"reboot drill: the run ended {ended_after:.1f} s after pct reboot began, rc {rc}")
    assert rc != 0, out[-3000:]
    assert "UNREACHABLE" in out or "MODULE FAILURE" in out, out[-3000:]
    # the checklist says why the host went, in todo.json as on the terminal: not a message that
    # stops at "...over ssh:" (ssh said nothing when the reboot cut its connection)
    todo = json.loads((tmp_path / "latest" / "todo.json").read_text())
    failed = [i for i in todo["todos"] if i["status"] == "failed"]
    print("reboot drill: todo.json says " + " | ".join(i["message"] for i in failed))
    assert failed and all(not i["message"].rstrip().endswith(":") for i in failed), failed
    assert wait_for(lambda: ct.exec("true", check=False).returncode == 0, 120, 2)
    # pct reboot returns once the container runs; the rerun needs its sshd: the boot's jobs done
    ct.exec("timeout", "300", "systemctl", "is-system-running", "--wait", check=False)
    wait_for_ssh(ADDRESS)
    assert sh(ct, f"readlink -f {VENV}") == old  # the interrupted switch left the old venv
    assert_recovers(ct, target, old_venv=f"{RELEASES}/previous")


def test_disk_full_mid_upgrade_names_the_filesystem(ct):
    drop_previous(ct)
    old = sh(ct, f"readlink -f {VENV}")
    before = venv_versions(ct)
    target = "0.1.4" if before["sglang"] == "0.1.5" else "0.1.5"
    # leave 12 MiB: the free-space check (64 MiB for a venv with pip) refuses before any change
    avail = f"$(df --output=avail -B1 {PREFIX} | tail -n1)"
    sh(ct, f"fallocate -l $(( {avail} - 12*1024*1024 )) {PREFIX}/filler")
    result = converge(ct, target)
    assert result.rc != 0, str(result)
    assert f"no space left on {PREFIX} (" in result.output, str(result)
    assert "needed" in result.output
    assert sh(ct, f"readlink -f {VENV}") == old
    # with the check off, the disk runs full while uv fills the release (the lock's wheels take
    # about 1.5 MB unpacked; leave 256 KiB): ENOSPC, named
    sh(ct, f"fallocate -l $(( {avail} - 256*1024 )) {PREFIX}/filler2")
    start = time.monotonic()
    result = converge(ct, target, sglang_stack_space_factor=0, sglang_stack_space_overhead_mb=0)
    print(f"disk full drill: {time.monotonic() - start:.1f} s")
    assert result.rc != 0, str(result)
    assert f"no space left on {PREFIX} (" in result.output, str(result)
    assert "did not download" not in result.output
    assert sh(ct, f"readlink -f {VENV}") == old  # the old venv still serves
    assert venv_versions(ct) == before
    assert sh(ct, f"ls -d {RELEASES}/{target}-* 2>/dev/null || true") == ""  # partial removed
    sh(ct, f"rm -f {PREFIX}/filler {PREFIX}/filler2")
    assert_recovers(ct, target, old_venv=old)


def test_network_cut_during_a_task_is_survived(ct):
    veth = subprocess.run(["lxc-info", "-n", str(VMID), "-H", "-c", "lxc.net.0.veth.pair"],
                          capture_output=True, text=True).stdout.strip()
    if not veth:
        info = subprocess.run(["lxc-info", "-n", str(VMID)], capture_output=True, text=True).stdout
        veth = next((ln.split()[-1] for ln in info.splitlines() if ln.startswith("Link:")), "")
    assert veth, "no host veth for the container"
    target = "0.1.4" if venv_versions(ct)["sglang"] == "0.1.5" else "0.1.5"
    hold_lock(ct)
    run = Run(ct, ct.drill_vars(target, sglang_stack_lock_wait=300))
    assert wait_for(run.install_task_started, 300, 1), run.output[-3000:]
    # the module runs in the container, waiting at the held lock: its session is open
    assert wait_for(lambda: module_at_lock(ct), 300, 0.5), run.output[-3000:]
    subprocess.run(["ip", "link", "set", veth, "down"], check=True)
    try:
        time.sleep(25)  # shorter than the keep-alive's 60 s: the connection must survive it
    finally:
        subprocess.run(["ip", "link", "set", veth, "up"], check=True)
    release_lock(ct)
    rc = run.wait(300)
    assert rc == 0, run.output[-3000:]
    assert venv_versions(ct)["sglang"] == target
    assert_recovers(ct, target, old_venv=f"{RELEASES}/previous", converged=True)
