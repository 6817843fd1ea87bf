"""The filesystem and process side of a stack release: free space and its messages, the
per-target install lock, the installer in its own process group, the venv link switched with one
rename, folders removed or set aside (module sglang_stack_release; unit-tested in
tests/unit/faults and tests/unit/sglang/test_stack_logic.py)."""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import signal
import subprocess
import time

# Free bytes under which a failed install is reported as a full filesystem.
FULL_BELOW = 16 * 1024 * 1024


def mount_point(path: str) -> str:
    path = os.path.realpath(path)
    while not os.path.ismount(path):
        path = os.path.dirname(path)
    return path


def free_bytes(path: str) -> int:
    st = os.statvfs(path)
    return st.f_bavail * st.f_frsize


def human(n: float) -> str:
    for unit in ("bytes", "KB", "MB", "GB", "TB"):
        if abs(n) < 1000 or unit == "TB":
            return f"{n:.0f} {unit}" if unit in ("bytes", "KB", "MB") else f"{n:.1f} {unit}"
        n /= 1000
    return f"{n:.1f} TB"


class Lock:
    """flock on a file; the descriptor is inherited by the installer it starts."""

    def __init__(self, path: str):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        self.path = path
        self.fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)

    def holder(self) -> str:
        """Who holds the lock: the pid from /proc/locks and its command line."""
        inode = os.fstat(self.fd).st_ino
        try:
            with open("/proc/locks", encoding="ascii") as fh:
                lines = fh.read().splitlines()
        except OSError:
            lines = []
        for line in lines:
            parts = line.split()
            if "->" in parts or len(parts) < 6 or parts[1] != "FLOCK":
                continue
            if parts[5].rsplit(":", 1)[-1] != str(inode):
                continue
            pid = parts[4]
            try:
                with open(f"/proc/{pid}/cmdline", "rb") as fh:
                    cmd = fh.read().replace(b"\0", b" ").decode(errors="replace").strip()
            except OSError:
                cmd = "?"
            return f"held by pid {pid}: {cmd[:200]}"
        return "holder unknown"

    def acquire(self, wait: int) -> float:
        start = time.monotonic()
        while True:
            try:
                fcntl.flock(self.fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() - start >= wait:
                    raise TimeoutError(self.holder()) from None
                time.sleep(1)
        os.ftruncate(self.fd, 0)
        since = time.strftime("%Y-%m-%dT%H:%M:%S%z")
        os.pwrite(self.fd, f"pid {os.getpid()} since {since}\n".encode(), 0)
        os.set_inheritable(self.fd, True)
        return time.monotonic() - start


def run(argv: list[str], timeout: int, lock_fd: int,
        env: dict | None = None) -> tuple[int, str, bool]:
    """Run argv in its own process group holding the lock fd; stop the group after timeout."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, pass_fds=(lock_fd,),
                            env={**os.environ, **(env or {})})
    try:
        out, _err = proc.communicate(timeout=timeout)
        return proc.returncode, out, False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _err = proc.communicate()
        return -9, out, True


def link_target(venv: str) -> str | None:
    if os.path.islink(venv):
        return os.path.realpath(venv)
    return None


def switch_link(link: str, target: str) -> None:
    """Point link at target with one rename of a new symlink over the old one."""
    rel = os.path.relpath(target, os.path.dirname(link))
    tmp = f"{link}.new-{os.getpid()}"
    if os.path.lexists(tmp):
        os.unlink(tmp)
    os.symlink(rel, tmp)
    os.replace(tmp, link)


def disk_full(out: str, ctx: dict) -> bool:
    """ENOSPC in the output, or (venv hides ensurepip's own output) a full filesystem at the
    moment of the failure."""
    return (ctx.get("free_at_failure", 1 << 62) < FULL_BELOW or "No space left on device" in out
            or "[Errno 28]" in out or "Disk quota exceeded" in out)


def full_message(ctx: dict) -> str:
    free = human(free_bytes(ctx["releases_dir"]))
    need = f", about {human(ctx['need'])} needed" if ctx.get("need") else ""
    step = ctx.get("step", "installing the stack into")
    removed = ctx.get("removed_note", "the half-installed release was removed")
    return (f"no space left on {ctx['mount']} ({free} free now{need}) while {step} "
            f"{ctx['release_dir']}; {removed} and the current venv is unchanged. Free space "
            "there and run again.")


def classify(out: str, rc: int, timed_out: bool, ctx: dict) -> str:
    tail = " | ".join(line.strip() for line in out.strip().splitlines()[-6:])
    where = ctx["release_dir"]
    removed = ctx.get("removed_note", "the half-installed release was removed")
    if timed_out:
        return (f"the stack install into {where} did not finish within {ctx['timeout']} s "
                f"(sglang_stack_install_timeout) and was stopped; {removed} and the current venv "
                f"is unchanged. Last output: {tail}")
    if disk_full(out, ctx):
        return full_message(ctx)
    # pip: "THESE PACKAGES DO NOT MATCH THE HASHES"; uv: "Hash mismatch for `pin`", or, for a
    # wheel cut short, "Failed to extract archive: <file>"
    if ("DO NOT MATCH THE HASHES" in out or "hash mismatch" in out.lower()
            or "Failed to extract archive" in out):
        bad = re.findall(r"^\s*(\S+\.whl)\b.*$", out, re.M)
        bad += re.findall(r"[Hh]ash mismatch for `([^`]+)`", out)
        bad += re.findall(r"Failed to extract archive: (\S+\.whl)", out)
        named = ", ".join(sorted(set(bad))) or tail
        return (f"a wheel in {ctx['wheel_dir']} does not match the lock's sha256 ({named}); remove "
                "it there and run again, the wheelhouse copies it anew. The current venv is "
                f"unchanged ({removed}).")
    return (f"{ctx.get('installer', 'pip')} install into {where} failed (exit {rc}); "
            f"{removed} and the current venv is unchanged. Last output: {tail}")


def remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):  # rmtree leaves nothing behind normally; a symlink is unlinked
        with contextlib.suppress(OSError):
            os.unlink(path)


def aside_dir(path: str) -> str:
    """A new folder name beside path (path.<time>), one that no folder holds yet."""
    stamp = time.strftime("%Y%m%d%H%M%S")
    name, n = f"{path}.{stamp}", 1
    while os.path.lexists(name):
        name, n = f"{path}.{stamp}-{n}", n + 1
    return name
