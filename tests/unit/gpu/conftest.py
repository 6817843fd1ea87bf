"""Fixtures for the GPU unit tests (helpers live in gpu_helpers.py)."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))

from gpu_helpers import FakeProc


@pytest.fixture
def fake_proc(tmp_path):
    return FakeProc(tmp_path / "proc")
