"""The artifact folder: one sub-folder per run, and ``latest`` pointing at the last one."""

from __future__ import annotations

import os
import secrets
from datetime import UTC, datetime
from pathlib import Path

from .errors import RunError
from .reports import TODO_JSON

LATEST = "latest"


def new_run_id(playbook: Path) -> str:
    """``20261130T043728Z-site-3f9a``: sorts by time, says which playbook; two runs of one
    second may draw the same one (1 in 65,536), so a run's folder comes from new_run_dir."""
    stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
    return f"{stamp}-{playbook.stem}-{secrets.token_hex(2)}"


def new_run_dir(root: Path, playbook: Path) -> Path:
    """A new folder under root, named by new_run_id and made here: a name another run took
    first draws again, so two runs never share a folder."""
    root.mkdir(parents=True, exist_ok=True)
    while True:
        run_dir = root / new_run_id(playbook)
        try:
            run_dir.mkdir()
        except FileExistsError:
            continue
        return run_dir


def mark_latest(root: Path, run_dir: Path) -> None:
    """Point ``root/latest`` at ``run_dir`` (a relative symlink, replaced atomically)."""
    link = root / LATEST
    tmp = root / f".{LATEST}.{os.getpid()}"
    tmp.unlink(missing_ok=True)
    try:
        tmp.symlink_to(run_dir.name, target_is_directory=True)
        os.replace(tmp, link)
    except OSError:
        tmp.unlink(missing_ok=True)


def find_run(root: Path, run_id: str | None = None) -> Path:
    """The folder of run ``run_id``, or of the last run when None."""
    if run_id:
        run_dir = root / run_id
        if not (run_dir / TODO_JSON).is_file():
            raise RunError(f"no checklist for run {run_id!r} under {root}")
        return run_dir
    latest = root / LATEST
    if (latest / TODO_JSON).is_file():
        return latest.resolve()
    runs = sorted(
        (p for p in root.glob(f"*/{TODO_JSON}") if p.parent.name != LATEST),
        key=lambda p: p.stat().st_mtime,
    )
    if not runs:
        raise RunError(f"no run found under {root} (run `sglang-lxc run` first)")
    return runs[-1].parent
