"""uv on a target: its binary taken out of its pinned wheel, and the environment it runs with.

Shared by the sglang_stack_release and wheelhouse_uv modules; unit-tested in
tests/unit/sglang/test_stack_logic.py.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import stat
import tempfile
import zipfile


def uv_env(cache_dir: str, link_mode: str) -> dict[str, str]:
    """Environment for uv: its cache, how it links files out of it, nothing read from outside."""
    env = {"UV_NO_CONFIG": "1", "UV_OFFLINE": "1", "UV_PYTHON_DOWNLOADS": "never",
           "UV_LINK_MODE": link_mode, "UV_NO_PROGRESS": "1"}
    if cache_dir:
        env["UV_CACHE_DIR"] = cache_dir
    else:
        env["UV_NO_CACHE"] = "1"
    return env


def sha256_file(path: str) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def ensure_uv(wheel: str, sha256: str, dest_dir: str) -> tuple[str, bool]:
    """uv's binary from its wheel at dest_dir/uv (checked against the wheel's sha256).

    Returns (path, changed). The binary is written beside and renamed into place, so an
    interrupted extraction never leaves a partial uv.
    """
    dest = os.path.join(dest_dir, "uv")
    if os.path.isfile(dest) and os.access(dest, os.X_OK):
        return dest, False
    got = sha256_file(wheel)
    if got != sha256:
        raise ValueError(f"{wheel} does not match the lock's sha256 ({got} != {sha256})")
    os.makedirs(dest_dir, exist_ok=True)
    with zipfile.ZipFile(wheel) as zf:
        names = [n for n in zf.namelist() if re.fullmatch(r"[^/]+\.data/scripts/uv", n)]
        if not names:
            raise ValueError(f"{wheel} holds no uv binary (*.data/scripts/uv)")
        fd, tmp = tempfile.mkstemp(dir=dest_dir, prefix=".uv-")
        try:
            with os.fdopen(fd, "wb") as out, zf.open(names[0]) as src:
                shutil.copyfileobj(src, out)
                out.flush()
                os.fsync(out.fileno())
            os.chmod(tmp, stat.S_IRWXU | stat.S_IRGRP | stat.S_IXGRP | stat.S_IROTH | stat.S_IXOTH)
            os.replace(tmp, dest)
        except BaseException:
            if os.path.exists(tmp):
                os.unlink(tmp)
            raise
    return dest, True
