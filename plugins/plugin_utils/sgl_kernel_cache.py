# Copyright: sglang-lxc contributors
# Apache-2.0
"""The controller's sgl-kernel source cache, shared by concurrent runs: its lock, the clone's
fetch and checkout (done under the lock), and the pruning of old build copies.

- **The lock** (``<cache>/.sglang-lxc-sources.lock``): an exclusive ``flock`` held around every
  fetch, checkout, build copy and archive of a run. The file says who holds it (pid, host, start
  time, inventory host); a second run waits, saying so, up to ``wait`` seconds. The kernel
  releases a ``flock`` when its holder dies, so a lock left by a killed run is free: the next run
  finds the dead run's record still in the file (a clean release empties it), says that it takes
  the lock over, and removes the killed run's half-made folders (``*.partial``). The descriptor is
  passed to the git processes a run starts, so a git left running by a killed run keeps the cache
  locked until it ends.
- **Checkout**: the clone of ``sglang_kernel_source_git_url`` fetched and checked out at the ref,
  under the lock (two runs fetching into one clone race on ``FETCH_HEAD``).
- **Pruning**: build copies (and their archives) beyond the newest ``keep`` by last use; the
  ones in use are always kept.

Unit-tested in tests/unit/sglang/test_kernel_cache.py (real git, real concurrent processes).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import socket
import subprocess
import time
from collections.abc import Callable, Iterator

LOCK_NAME = ".sglang-lxc-sources.lock"
RECORD = ".sglang-lxc-transform.json"
PARTIAL_FOLDERS = ("build-copies", "deps", "archives", "git")


class CacheError(Exception):
    """A lock not had in time, or git's refusal."""


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def describe(holder: dict) -> str:
    """'pid 123 on ctl (started 2026-12-03 10:01:02 UTC, run for ct200)'."""
    if not holder:
        return "another run"
    started = time.strftime("%Y-%m-%d %H:%M:%S UTC", time.gmtime(holder.get("started", 0)))
    text = f"pid {holder.get('pid')} on {holder.get('host')} (started {started}"
    if holder.get("run"):
        text += f", {holder['run']}"
    text += ")"
    gone = holder.get("host") == socket.gethostname() and not _alive(int(holder.get("pid", 0)))
    return text + (": that process is gone, a git it started still runs" if gone else "")


def _read(handle) -> dict:
    handle.seek(0)
    text = handle.read().strip()
    try:
        return json.loads(text) if text else {}
    except ValueError:
        return {"pid": "?", "host": "?", "run": text[:200]}


def _partials(cache: str) -> list[str]:
    found = []
    for sub in PARTIAL_FOLDERS:
        folder = os.path.join(cache, sub)
        if os.path.isdir(folder):
            found += [os.path.join(folder, n) for n in os.listdir(folder) if ".partial" in n]
    return sorted(found)


@contextlib.contextmanager
def locked(
    cache: str, wait: float, say: Callable[[str], None], run: str = "", poll: float = 30
) -> Iterator[dict]:
    """Hold the cache's lock; yields {"fd", "waited_s", "took_over"}."""
    os.makedirs(cache, exist_ok=True)
    path = os.path.join(cache, LOCK_NAME)
    start = time.monotonic()
    said = None
    with open(path, "a+", encoding="utf-8") as handle:
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                now = time.monotonic()
                holder = describe(_read(handle))
                if now - start > wait:
                    raise CacheError(
                        f"sgl-kernel sources: the source cache lock {path} is still held by "
                        f"{holder} after {int(wait)} s (sglang_kernel_source_lock_wait)"
                    ) from None
                if said is None or now - said >= poll:
                    say(f"sgl-kernel sources: waiting for the source cache lock {path}, held by "
                        f"{holder}")  # fmt: skip
                    said = now
                time.sleep(min(0.2, poll))
        left = _read(handle)
        took_over = {}
        if left:  # a holder that never released: killed
            removed = _partials(cache)
            for folder in removed:
                if os.path.isdir(folder):
                    shutil.rmtree(folder, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(folder)
            took_over = {"holder": left, "removed": removed}
            say(
                f"sgl-kernel sources: took over the source cache lock {path} left by "
                f"{describe(left)}, a run that ended without releasing it (killed); removed its "
                f"{len(removed)} half-made folder(s)"
            )
        handle.seek(0)
        handle.truncate()
        json.dump(
            {"pid": os.getpid(), "host": socket.gethostname(), "started": time.time(), "run": run},
            handle,
        )
        handle.flush()
        try:
            yield {
                "fd": handle.fileno(),
                "waited_s": round(time.monotonic() - start, 1),
                "took_over": took_over,
            }
        finally:
            handle.seek(0)
            handle.truncate()
            handle.flush()
            fcntl.flock(handle, fcntl.LOCK_UN)


def git_runner(env: dict, fd: int | None = None, run=subprocess.run):
    """git with the rewrites' environment; the lock's descriptor goes to every git it starts."""
    full_env = {**os.environ, **env}

    def git(*args: str, cwd: str | None = None) -> subprocess.CompletedProcess:
        return run(
            ["git", *args],
            cwd=cwd,
            env=full_env,
            capture_output=True,
            text=True,
            timeout=3600,
            check=False,
            pass_fds=(fd,) if fd is not None else (),
        )

    return git


def git_reason(done: subprocess.CompletedProcess) -> str:
    """git's own reason: what the remote said ('remote:' lines) and git's last 'fatal:' line.

    A corrupt mirror answers 'remote: fatal: unable to read <blob>' first; git's first 'fatal:'
    on this side ('protocol error: bad pack header', 'early EOF') is only the consequence.
    """
    text = "".join(c for c in (done.stderr or done.stdout or "") if c.isprintable() or c == "\n")
    lines = [ln.strip() for ln in text.splitlines() if ln.strip()]
    remote = [ln for ln in lines if ln.startswith("remote:")]
    fatal = [ln for ln in lines if ln.startswith("fatal:")]
    said = list(dict.fromkeys(remote[-5:] + fatal[-1:]))
    return " / ".join(said or lines[-1:] or [f"git exited with {done.returncode}"])


def checkout(clone: str, url: str, ref: str, git) -> dict:
    """The clone at ref (fetched from url when not already there); {"commit", "changed"}."""
    if not os.path.isdir(os.path.join(clone, ".git")):
        os.makedirs(os.path.dirname(clone) or ".", exist_ok=True)
        done = git("init", "--quiet", clone)
        if done.returncode != 0:
            raise CacheError(f"sgl-kernel source: git init {clone}: {git_reason(done)}")
    before = git("-C", clone, "rev-parse", "--verify", "--quiet", "HEAD").stdout.strip()
    fetched = git("-C", clone, "fetch", "--quiet", url, ref)
    if fetched.returncode != 0:
        raise CacheError(f"sgl-kernel source: git fetch {url} {ref}: {git_reason(fetched)}")
    done = git("-C", clone, "checkout", "--quiet", "--force", "--detach", "FETCH_HEAD")
    if done.returncode != 0:
        raise CacheError(f"sgl-kernel source: git checkout {ref} in {clone}: {git_reason(done)}")
    after = git("-C", clone, "rev-parse", "HEAD").stdout.strip()
    return {"commit": after, "changed": after != before}


def mark_used(build_copy: str) -> None:
    """A build copy's last use is its record's mtime (what pruning orders by)."""
    record = os.path.join(build_copy, RECORD)
    if os.path.isfile(record):
        os.utime(record)


def disk_bytes(path: str) -> int:
    """Bytes a folder or file takes on disk (allocated blocks, links not followed)."""
    if not os.path.isdir(path):
        return os.lstat(path).st_blocks * 512 if os.path.lexists(path) else 0
    total = 0
    for dirpath, dirnames, filenames in os.walk(path):
        for name in dirnames + filenames:
            total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
    return total


def prune(cache: str, keep: int, in_use: list[str]) -> dict:
    """Remove build copies (and archives) beyond the newest ``keep``; in_use ones stay."""
    copies_dir = os.path.join(cache, "build-copies")
    if not os.path.isdir(copies_dir):
        return {"removed": [], "kept": [], "freed_bytes": 0}
    copies = [
        os.path.join(copies_dir, n)
        for n in os.listdir(copies_dir)
        if ".partial" not in n and os.path.isdir(os.path.join(copies_dir, n))
    ]

    def last_use(path: str) -> float:
        record = os.path.join(path, RECORD)
        return os.path.getmtime(record if os.path.isfile(record) else path)

    copies.sort(key=last_use, reverse=True)
    in_use_set = {os.path.realpath(p) for p in in_use if p}
    kept = [c for c in copies if os.path.realpath(c) in in_use_set]
    for path in copies:
        if len(kept) >= max(keep, len(in_use_set)):
            break
        if path not in kept:
            kept.append(path)
    removed, freed = [], 0
    for path in copies:
        if path in kept:
            continue
        archive = os.path.join(cache, "archives", f"sgl-kernel-{os.path.basename(path)}.tar.gz")
        freed += disk_bytes(path) + disk_bytes(archive)
        shutil.rmtree(path)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(archive)
        removed.append(path)
    return {"removed": removed, "kept": sorted(kept), "freed_bytes": freed}


def human(size: int) -> str:
    for unit in ("bytes", "KiB", "MiB", "GiB"):
        if size < 1024 or unit == "GiB":
            return f"{size:.1f} {unit}" if unit != "bytes" else f"{size} bytes"
        size /= 1024
    return f"{size} bytes"
