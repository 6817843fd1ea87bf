"""A source tree's identity: a content hash of a folder, or git's tree id of a clone's subdir.

Shared by the actions sglang_kernel_sources (which build copy a tree gets) and sglang_kernel_plan
(the stamp that says whether the installed build is of this tree). Unit-tested in
tests/unit/sglang/test_kernel_plan.py.
"""

from __future__ import annotations

import hashlib
import os
import subprocess

# Not part of a source tree's identity (build output, VCS data, byte code).
SKIP_TOP = ("build", "dist", ".git")


def folder_tree_id(root: str) -> str:
    """Content hash of a source folder: 40 hex digits, equal for equal trees.

    The same figure as ``find . -type f ! -path './build/*' ! -path './dist/*' ! -path
    './.git/*' ! -name '*.pyc' | LC_ALL=C sort | xargs sha256sum | sha256sum | cut -c1-40``, so
    stamps written before this plugin stay valid.
    """
    entries = []
    for dirpath, dirnames, filenames in os.walk(root):
        rel_dir = os.path.relpath(dirpath, root)
        if rel_dir == ".":
            dirnames[:] = [d for d in dirnames if d not in SKIP_TOP]
        for name in filenames:
            path = os.path.join(dirpath, name)
            if name.endswith(".pyc") or os.path.islink(path) or not os.path.isfile(path):
                continue
            rel = "./" + os.path.relpath(path, root)
            entries.append((os.fsencode(rel), path))
    listing = hashlib.sha256()
    for rel, path in sorted(entries):
        digest = hashlib.sha256()
        with open(path, "rb") as handle:
            for chunk in iter(lambda: handle.read(1 << 20), b""):
                digest.update(chunk)
        listing.update(digest.hexdigest().encode() + b"  " + rel + b"\n")
    return listing.hexdigest()[:40]


def git_tree_id(clone: str, subdir: str) -> tuple[str, str]:
    """(git tree id of ``subdir`` at HEAD, error text); the id is "" on error."""
    ref = "HEAD:" + subdir.strip("/")
    try:
        done = subprocess.run(
            ["git", "-C", clone, "rev-parse", ref],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    except OSError as exc:
        return "", str(exc)
    if done.returncode != 0:
        return "", (done.stderr or done.stdout).strip()
    return done.stdout.strip(), ""
