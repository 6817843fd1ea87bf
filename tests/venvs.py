"""Real venvs (no pip) that hold hand-made distributions, for the stack's unit tests."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def make_venv(path: Path, dists: dict[str, str]) -> Path:
    """A real venv (no pip) with hand-made .dist-info folders for the given distributions."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(path)], check=True)
    site = next(path.glob("lib/python3*/site-packages"))
    for name, version in dists.items():
        info = site / f"{name.replace('-', '_')}-{version}.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return path
