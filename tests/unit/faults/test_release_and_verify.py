"""The fault-handling pieces of roles wheelhouse and sglang that need no container: the
controller's sha256 check, the per-target lock, the venv link switch, and the failure messages."""

from __future__ import annotations

import fcntl
import hashlib
import os
import subprocess
import sys
import time

import pytest
from ansible_collections.sglang_lxc.serving.plugins.module_utils import (
    sglang_release_fs as release_fs,
)
from ansible_collections.sglang_lxc.serving.plugins.modules import wheelhouse_verify as verify_mod


def test_verify_removes_a_truncated_wheel_and_caches_good_digests(tmp_path):
    good, bad = tmp_path / "a-1.0-py3-none-any.whl", tmp_path / "b-2.0-py3-none-any.whl"
    good.write_bytes(b"good wheel")
    full = b"complete wheel bytes"
    bad.write_bytes(full[:7])  # truncated
    allowed = {hashlib.sha256(b"good wheel").hexdigest(), hashlib.sha256(full).hexdigest()}
    cache: dict = {}
    result = verify_mod.verify(str(tmp_path), [good.name, bad.name, "c-3.0-py3-none-any.whl"],
                               allowed, cache, remove=True, check_mode=False)
    assert [b["path"] for b in result["bad"]] == [str(bad)]
    assert not bad.exists() and good.exists()
    assert result["missing"] == ["c-3.0-py3-none-any.whl"]
    assert result["checked"] == 1
    # the good digest is cached: a second pass reads nothing
    again = verify_mod.verify(str(tmp_path), [good.name], allowed, cache, True, False)
    assert again["hashed_bytes"] == 0 and again["checked"] == 1


def test_verify_rehashes_a_file_rewritten_in_place(tmp_path):
    wheel = tmp_path / "a-1.0-py3-none-any.whl"
    wheel.write_bytes(b"good wheel")
    allowed = {hashlib.sha256(b"good wheel").hexdigest()}
    cache: dict = {}
    verify_mod.verify(str(tmp_path), [wheel.name], allowed, cache, True, False)
    wheel.write_bytes(b"evil wheel")  # same size, new mtime
    os.utime(wheel, ns=(1, 1))
    result = verify_mod.verify(str(tmp_path), [wheel.name], allowed, cache, True, False)
    assert len(result["bad"]) == 1 and not wheel.exists()


def test_check_mode_reports_but_keeps_the_file(tmp_path):
    wheel = tmp_path / "a-1.0-py3-none-any.whl"
    wheel.write_bytes(b"x")
    result = verify_mod.verify(str(tmp_path), [wheel.name], {"0" * 64}, {}, True, True)
    assert len(result["bad"]) == 1 and wheel.exists()


def held_by_another(path) -> bool:
    """Whether another open file description holds an exclusive flock on path."""
    try:
        fd = os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        return True
    finally:
        os.close(fd)  # closing drops a lock this probe took
    return False


def test_lock_waits_then_names_its_holder(tmp_path):
    path = tmp_path / "install.lock"
    # flock(1) runs sleep with the lock's descriptor: like an orphaned pip, sleep holds it
    holder = subprocess.Popen(["flock", str(path), "sleep", "30"], start_new_session=True)
    try:
        # until flock(1) holds it: the file exists before the lock is taken (CI once took the
        # lock first, on a busy machine, and the test's acquire did not wait)
        for _ in range(100):
            if held_by_another(path):
                break
            subprocess.run(["sleep", "0.1"], check=True)
        else:
            pytest.fail("flock(1) never took the lock")
        with pytest.raises(TimeoutError) as err:
            release_fs.Lock(str(path)).acquire(1)
        assert "held by pid " in str(err.value) and "sleep 30" in str(err.value)
    finally:
        os.killpg(holder.pid, 9)
        holder.wait()
    lock = release_fs.Lock(str(path))
    lock.acquire(120)  # the killed holder's lock is released once it is gone: a wait, no bound
    assert f"pid {os.getpid()}" in path.read_text()
    # the descriptor is inherited by the installer, so an orphaned installer keeps the lock
    assert os.get_inheritable(lock.fd)
    child = release_fs.run([sys.executable, "-c", "import time; time.sleep(0.1)"], 120, lock.fd)
    assert child[0] == 0
    other = os.open(path, os.O_RDWR)
    with pytest.raises(BlockingIOError):
        fcntl.flock(other, fcntl.LOCK_EX | fcntl.LOCK_NB)
    os.close(other)


def test_switch_link_is_one_rename_of_a_relative_symlink(tmp_path):
    (tmp_path / "venvs" / "r1").mkdir(parents=True)
    (tmp_path / "venvs" / "r2").mkdir()
    link = tmp_path / "venv"
    release_fs.switch_link(str(link), str(tmp_path / "venvs" / "r1"))
    assert os.readlink(link) == "venvs/r1"
    inode = os.lstat(link).st_ino
    release_fs.switch_link(str(link), str(tmp_path / "venvs" / "r2"))
    assert os.readlink(link) == "venvs/r2"
    assert os.lstat(link).st_ino != inode  # a new link renamed over the old one
    assert sorted(p.name for p in tmp_path.iterdir()) == ["venv", "venvs"]  # no temp left


def test_timeout_stops_the_whole_process_group(tmp_path):
    """A run past its timeout is stopped with its whole group, a grandchild too. The child
    names its grandchild once it has started it; the timeout grows until it has (on busy
    cores Python can take longer than the first timeout to start)."""
    lock = release_fs.Lock(str(tmp_path / "l"))
    lock.acquire(1)
    named = tmp_path / "grandchild.pid"
    code = ("import os, subprocess, sys, time; "
            "p = subprocess.Popen(['sleep', '600'], stdout=subprocess.DEVNULL, "
            "stderr=subprocess.DEVNULL); "
            "open(sys.argv[1] + '.new', 'w').write(str(p.pid)); "
            "os.replace(sys.argv[1] + '.new', sys.argv[1]); time.sleep(600)")
    for timeout in (1, 2, 4, 8, 16, 32, 64):
        rc, _, timed_out = release_fs.run([sys.executable, "-c", code, str(named)], timeout,
                                          lock.fd)
        assert timed_out and rc == -9
        if named.exists():
            break
    else:
        pytest.fail("the child never started its grandchild")
    pid = int(named.read_text())
    try:
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.05)
        assert not _alive(pid), f"grandchild {pid} outlived the timeout's kill"
    finally:
        if _alive(pid):
            os.kill(pid, 9)


def _alive(pid: int) -> bool:
    """Running: not gone and not a zombie (killed, waiting for init to reap it)."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as stat:
            return stat.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


@pytest.mark.parametrize(
    ("out", "expected"),
    [
        ("ERROR: Could not install packages due to an OSError: [Errno 28] No space left on device",
         "no space left on /"),
        ("ERROR: THESE PACKAGES DO NOT MATCH THE HASHES FROM THE REQUIREMENTS FILE.\n"
         "    idna==3.10 from /w/idna-3.10-py3-none-any.whl:\n",
         "does not match the lock's sha256"),
        ("error: Failed to download `idna==3.10`\n  cause: Hash mismatch for `idna==3.10`\n",
         "does not match the lock's sha256 (idna==3.10)"),
        ("error: Failed to download `idna==3.10`\n  cause: Failed to extract archive: "
         "idna-3.10-py3-none-any.whl\n", "(idna-3.10-py3-none-any.whl)"),
        ("ERROR: something else", "pip install into /r failed (exit 1)"),
    ],
)
def test_failure_messages_say_what_broke_and_where(tmp_path, out, expected):
    ctx = {"release_dir": "/r", "releases_dir": str(tmp_path), "mount": "/", "need": 10**10,
           "timeout": 5, "wheel_dir": "/w"}
    msg = release_fs.classify(out, 1, False, ctx)
    assert expected in msg
    assert "current venv is unchanged" in msg
    if "space" in expected:
        assert "free now, about 10.0 GB needed" in msg
    assert "did not download" not in msg


def test_timeout_message_names_the_variable(tmp_path):
    ctx = {"release_dir": "/r", "releases_dir": str(tmp_path), "mount": "/", "need": 0,
           "timeout": 5, "wheel_dir": "/w"}
    assert "sglang_stack_install_timeout" in release_fs.classify("", -9, True, ctx)


def test_a_failure_on_a_full_filesystem_says_so_without_errno_28(tmp_path):
    """python -m venv hides ensurepip's output: the free space at the failure tells."""
    ctx = {"release_dir": "/r", "releases_dir": str(tmp_path), "mount": "/opt/sglang", "need": 0,
           "timeout": 5, "wheel_dir": "/w", "free_at_failure": 4096}
    out = "Error: Command '[..., 'ensurepip', '--upgrade']' returned non-zero exit status 1."
    assert release_fs.classify(out, 1, False, ctx).startswith("no space left on /opt/sglang (")


def test_verify_rehashes_a_same_size_same_mtime_rewrite_on_a_warm_cache(tmp_path):
    """Issue 21: bytes changed in place at the same size, the mtime put back (as `touch -r`,
    `cp --preserve` or a careless restore do). Size and mtime match the cache; the change time
    (which no one can set back) and the inode are in the key too, so the file is read again."""
    wheel = tmp_path / "a-1.0-py3-none-any.whl"
    wheel.write_bytes(b"good wheel")
    allowed = {hashlib.sha256(b"good wheel").hexdigest()}
    cache: dict = {}
    assert verify_mod.verify(str(tmp_path), [wheel.name], allowed, cache, True, False)["checked"]
    before = os.stat(wheel)
    time.sleep(0.02)  # a kernel without fine-grained timestamps moves ctime once per clock tick
    with open(wheel, "r+b") as fh:  # in place: the same inode
        fh.write(b"evil")
    os.utime(wheel, ns=(before.st_atime_ns, before.st_mtime_ns))
    after = os.stat(wheel)
    assert (after.st_size, after.st_mtime_ns) == (before.st_size, before.st_mtime_ns)
    result = verify_mod.verify(str(tmp_path), [wheel.name], allowed, cache, True, False)
    assert result["hashed_bytes"] == len(b"good wheel")  # read again, not taken from the cache
    assert [b["sha256"] for b in result["bad"]] == [hashlib.sha256(b"evil wheel").hexdigest()]
    assert not wheel.exists()
    # a file that did not change is still taken from the cache
    wheel.write_bytes(b"good wheel")
    verify_mod.verify(str(tmp_path), [wheel.name], allowed, cache, True, False)
    assert verify_mod.verify(str(tmp_path), [wheel.name], allowed, cache, True,
                             False)["hashed_bytes"] == 0
