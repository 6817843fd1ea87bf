"""The sgl-kernel fixture's FetchContent dependencies as git repositories.

tests/fixtures/sgl_kernel_fixture pins its dependencies (tests/fixtures/sgl_kernel_fixture_deps)
at git commits and a tag under URLs nobody serves (https://git.invalid/sglang-lxc-fixture/...).
``make_dep_repos`` turns each folder into a bare repository with a commit whose id depends on the
files alone (fixed author, committer and dates), so the pins stay valid on every machine; the
role reaches them through ``sglang_kernel_git_url_rewrites``, git's ``url.<base>.insteadOf``.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from tests.lablib import REPO

FIXTURE = REPO / "tests" / "fixtures" / "sgl_kernel_fixture"
DEPS = REPO / "tests" / "fixtures" / "sgl_kernel_fixture_deps"
URL_PREFIX = "https://git.invalid/sglang-lxc-fixture/"
TAGS = {"fixture-config": "v1.0"}
_ENV = {
    "GIT_AUTHOR_NAME": "sglang-lxc fixture",
    "GIT_AUTHOR_EMAIL": "fixture@sglang-lxc.invalid",
    "GIT_AUTHOR_DATE": "2026-01-01T00:00:00+0000",
    "GIT_COMMITTER_NAME": "sglang-lxc fixture",
    "GIT_COMMITTER_EMAIL": "fixture@sglang-lxc.invalid",
    "GIT_COMMITTER_DATE": "2026-01-01T00:00:00+0000",
    "GIT_CONFIG_GLOBAL": os.devnull,
    "GIT_CONFIG_NOSYSTEM": "1",
}


def _git(*args: str, cwd: Path) -> str:
    env = {**os.environ, **_ENV}
    return subprocess.run(
        ["git", *args], cwd=cwd, env=env, check=True, capture_output=True, text=True
    ).stdout.strip()


def make_dep_repos(dest: Path) -> dict[str, str]:
    """Bare repositories <dest>/<name>.git; returns {name: commit}."""
    commits = {}
    for src in sorted(p for p in DEPS.iterdir() if p.is_dir()):
        work = dest / "work" / src.name
        shutil.rmtree(work, ignore_errors=True)
        shutil.copytree(src, work)
        for path in [work, *work.rglob("*")]:
            path.chmod(0o755 if path.is_dir() else 0o644)
        _git("init", "-q", "-b", "main", cwd=work)
        _git("add", "-A", cwd=work)
        _git("commit", "-q", "-m", f"{src.name} for the sgl-kernel fixture", cwd=work)
        if src.name in TAGS:
            _git("tag", TAGS[src.name], cwd=work)
        commits[src.name] = _git("rev-parse", "HEAD", cwd=work)
        bare = dest / f"{src.name}.git"
        shutil.rmtree(bare, ignore_errors=True)
        _git("clone", "-q", "--bare", str(work), str(bare), cwd=dest)
    return commits


def url_rewrites(dest: Path) -> dict[str, str]:
    """sglang_kernel_git_url_rewrites for repositories made by make_dep_repos(dest)."""
    return {f"file://{dest}/": URL_PREFIX}
