#!/usr/bin/python
"""Install the stack into a fresh release venv, verify it, switch the venv link in one rename."""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import re
import shutil
import signal
import subprocess
import time

from ansible.module_utils.basic import AnsibleModule

DOCUMENTATION = r"""
module: sglang_stack_release
short_description: Build the serving venv aside and switch to it with one rename
description:
  - Installs a wheel set into a new venv I(releases_dir)/I(release), with no index (and
    C(--require-hashes) when asked), under an exclusive lock per target that a second install waits
    for (at most I(lock_wait) seconds) and that a still-running orphaned installer keeps holding.
  - Checks free space first (I(need_bytes)), verifies the new venv (every pin's exact version via
    importlib.metadata, then I(imports)), writes a completion marker last, then points I(venv)
    (a symlink) at it with one atomic rename. The release it replaced is kept as C(previous); older
    releases and half-installed ones are removed. A real folder at I(venv) (an in-place venv of an
    earlier layout) is moved into I(releases_dir) and kept as C(previous).
  - A failed install (disk full, killed, timed out, bad wheel) leaves I(venv) as it was; the
    message says what ran out or broke, and where.
options:
  venv:
    {description: Public venv path (becomes a symlink)., type: path, required: true}
  releases_dir:
    {description: Folder of the release venvs., type: path, required: true}
  release:
    {description: Name of the release for this lock (folder name)., type: str, required: true}
  python:
    {description: Python that creates the venv., type: path, required: true}
  wheel_dir:
    {description: Folder of the wheels (pip --find-links)., type: path, required: true}
  requirements:
    {description: Requirements file to install., type: path, required: true}
  require_hashes:
    {description: Install with pip --require-hashes., type: bool, default: true}
  install_args:
    {description: Extra pip install arguments., type: list, elements: str, default: []}
  pins:
    description: name==version pins whose exact versions the new venv must have.
    type: list
    elements: str
    default: []
  imports:
    {description: Modules the new venv must import., type: list, elements: str, default: []}
  need_bytes:
    {description: Free bytes needed on the releases folder's filesystem., type: int, default: 0}
  lock_file:
    {description: The per-target install lock., type: path, required: true}
  lock_wait:
    {description: Seconds to wait for another install's lock., type: int, default: 600}
  timeout:
    {description: Seconds the install may take before it is stopped., type: int, default: 3600}
"""

RETURN = r"""
release:
  {description: Path of the release now current., type: str, returned: success}
previous:
  {description: Path of the release kept for rollback, or null., type: str, returned: success}
removed:
  {description: Release folders removed (older or half-installed)., type: list, returned: success}
installed:
  {description: Whether this run installed a new release., type: bool, returned: success}
elapsed_s:
  {description: Seconds the install took., type: float, returned: success}
"""


MARKER = ".sglang-lxc-release.json"
# Free bytes under which a failed install is reported as a full filesystem.
FULL_BELOW = 16 * 1024 * 1024
PREVIOUS = "previous"

VERIFY_CODE = r"""
import importlib, importlib.metadata as md, json, re, sys
pins, imports = json.loads(sys.argv[1])
norm = lambda s: re.sub(r"[-_.]+", "-", s).lower()
have = {norm(d.metadata["Name"] or ""): d.version for d in md.distributions()}
bad = []
for pin in pins:
    name, _, want = pin.partition("==")
    got = have.get(norm(name))
    if got is None or got.lower() != want.strip().lower():
        bad.append("%s (found %s)" % (pin, got or "nothing"))
for mod in imports:
    try:
        importlib.import_module(mod)
    except Exception as exc:
        bad.append("import %s: %s: %s" % (mod, type(exc).__name__, exc))
print(json.dumps(bad))
"""


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


def run(argv: list[str], timeout: int, lock_fd: int) -> tuple[int, str, bool]:
    """Run argv in its own process group holding the lock fd; stop the group after timeout."""
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True, pass_fds=(lock_fd,))
    try:
        out, _ = proc.communicate(timeout=timeout)
        return proc.returncode, out, False
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
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


def classify(out: str, rc: int, timed_out: bool, ctx: dict) -> str:
    tail = " | ".join(line.strip() for line in out.strip().splitlines()[-6:])
    where = ctx["release_dir"]
    if timed_out:
        return (f"the stack install into {where} did not finish within {ctx['timeout']} s "
                f"(sglang_stack_install_timeout) and was stopped; the current venv is unchanged. "
                f"Last output: {tail}")
    # venv hides ensurepip's own output, so a full filesystem is also read from its free space
    # at the moment of the failure
    full = ctx.get("free_at_failure", 1 << 62) < FULL_BELOW
    if full or "No space left on device" in out or "[Errno 28]" in out:
        free = human(free_bytes(ctx["releases_dir"]))
        return (f"no space left on {ctx['mount']} ({free} free now, about {human(ctx['need'])} "
                f"needed) while installing the stack into {where}; the half-installed release was "
                "removed and the current venv is unchanged. Free space there and run again.")
    if "DO NOT MATCH THE HASHES" in out or "hash mismatch" in out.lower():
        bad = re.findall(r"^\s*(\S+\.whl)\b.*$", out, re.M)
        named = ", ".join(sorted(set(bad))) or tail
        return (f"a wheel in {ctx['wheel_dir']} does not match the lock's sha256 ({named}); remove "
                "it there and run again, the wheelhouse copies it anew. The current venv is "
                "unchanged.")
    return (f"pip install into {where} failed (exit {rc}); the current venv is unchanged. "
            f"Last output: {tail}")


def remove_tree(path: str) -> None:
    shutil.rmtree(path, ignore_errors=True)
    if os.path.lexists(path):  # rmtree leaves nothing behind normally; a symlink is unlinked
        with contextlib.suppress(OSError):
            os.unlink(path)


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "releases_dir": {"type": "path", "required": True},
            "release": {"type": "str", "required": True},
            "python": {"type": "path", "required": True},
            "wheel_dir": {"type": "path", "required": True},
            "requirements": {"type": "path", "required": True},
            "require_hashes": {"type": "bool", "default": True},
            "install_args": {"type": "list", "elements": "str", "default": []},
            "pins": {"type": "list", "elements": "str", "default": []},
            "imports": {"type": "list", "elements": "str", "default": []},
            "need_bytes": {"type": "int", "default": 0},
            "lock_file": {"type": "path", "required": True},
            "lock_wait": {"type": "int", "default": 600},
            "timeout": {"type": "int", "default": 3600},
        },
        supports_check_mode=True,
    )
    p = module.params
    venv, releases = p["venv"].rstrip("/"), p["releases_dir"].rstrip("/")
    release_dir = os.path.join(releases, p["release"])
    marker = os.path.join(release_dir, MARKER)
    previous_link = os.path.join(releases, PREVIOUS)
    current = link_target(venv)
    legacy = os.path.isdir(venv) and not os.path.islink(venv)
    up_to_date = current == os.path.realpath(release_dir) and os.path.isfile(marker)
    result = {"release": release_dir, "previous": link_target(previous_link), "removed": [],
              "installed": False, "elapsed_s": 0.0, "lock_waited_s": 0.0}
    if up_to_date:
        module.exit_json(changed=False, **result)
    if module.check_mode:
        module.exit_json(changed=True, **result)

    os.makedirs(releases, exist_ok=True)
    lock = Lock(p["lock_file"])
    try:
        result["lock_waited_s"] = round(lock.acquire(p["lock_wait"]), 1)
    except TimeoutError as exc:
        module.fail_json(msg=(
            f"another stack install on this host still holds {p['lock_file']} ({exc}) after "
            f"{p['lock_wait']} s (sglang_stack_lock_wait); an install left running by a dead "
            "controller ends by itself within sglang_stack_install_timeout. Run again later, or "
            "stop that process."), **result)

    # State may have moved while we waited.
    current = link_target(venv)
    legacy = os.path.isdir(venv) and not os.path.islink(venv)
    ctx = {"release_dir": release_dir, "releases_dir": releases, "mount": mount_point(releases),
           "need": p["need_bytes"], "timeout": p["timeout"], "wheel_dir": p["wheel_dir"]}
    if not os.path.isfile(marker):
        if os.path.lexists(release_dir):
            remove_tree(release_dir)
            result["removed"].append(release_dir)
            module.warn(f"removed the half-installed release {release_dir} "
                        "left by an interrupted install")
        free = free_bytes(releases)
        if p["need_bytes"] and free < p["need_bytes"]:
            module.fail_json(msg=(
                f"no space left on {ctx['mount']} ({human(free)} free, about "
                f"{human(p['need_bytes'])} needed) to install the stack into {release_dir}; the "
                "current venv is unchanged. Free space there and run again."), **result)
        start = time.monotonic()
        rc, out, timed_out = run([p["python"], "-m", "venv", release_dir], 300, lock.fd)
        if rc == 0:
            argv = [os.path.join(release_dir, "bin", "python"), "-m", "pip", "install",
                    "--no-index", "--find-links", p["wheel_dir"], "--disable-pip-version-check",
                    "--no-input",
                    "--progress-bar", "off", "--no-cache-dir", "--requirement", p["requirements"]]
            argv += (["--require-hashes"] if p["require_hashes"] else []) + p["install_args"]
            rc, out, timed_out = run(argv, p["timeout"], lock.fd)
        if rc != 0:
            ctx["free_at_failure"] = free_bytes(releases)
            msg = classify(out, rc, timed_out, ctx)
            remove_tree(release_dir)
            module.fail_json(msg=msg, rc=rc, stdout=out[-4000:], **result)
        rc, out, _ = run([os.path.join(release_dir, "bin", "python"), "-c", VERIFY_CODE,
                          json.dumps([p["pins"], p["imports"]])], 600, lock.fd)
        lines = out.strip().splitlines()
        problems = json.loads(lines[-1]) if rc == 0 and lines else [out[-2000:]]
        if problems:
            remove_tree(release_dir)
            module.fail_json(msg=(
                f"the new release {release_dir} failed its check, so it was removed and the "
                f"current venv is unchanged: {'; '.join(problems[:10])}"), **result)
        tmp = f"{marker}.tmp"
        with open(tmp, "w", encoding="utf-8") as fh:
            json.dump({"release": p["release"], "pins": len(p["pins"]), "imports": p["imports"],
                       "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z")}, fh)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, marker)
        result["installed"] = True
        result["elapsed_s"] = round(time.monotonic() - start, 1)

    # Switch: the old current becomes previous; one rename makes the new one current.
    old = None
    if legacy:
        old = os.path.join(releases, "legacy-" + time.strftime("%Y%m%d%H%M%S"))
        os.rename(venv, old)
    elif current and current != os.path.realpath(release_dir) and os.path.isdir(current):
        old = current
    switch_link(venv, release_dir)
    if old:
        switch_link(previous_link, old)
    keep = {os.path.realpath(release_dir), link_target(previous_link)}
    for name in sorted(os.listdir(releases)):
        path = os.path.join(releases, name)
        if name == PREVIOUS or os.path.islink(path) or not os.path.isdir(path):
            continue
        if os.path.realpath(path) not in keep:
            remove_tree(path)
            result["removed"].append(path)
    result["previous"] = link_target(previous_link)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
