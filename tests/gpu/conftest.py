"""GPU suite: runs on a machine with an NVIDIA driver; everything skips cleanly without one.

``scripts/gpu-check`` runs it on a GPU machine. Nothing here changes the GPU's settings: the tests
allocate memory in their own processes and stop only those.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))


def nvml_problem() -> str | None:
    """None when NVML answers with at least one GPU, else why not."""
    try:
        import pynvml
    except ImportError as exc:
        return f"no GPU: nvidia-ml-py is not installed ({exc})"
    try:
        pynvml.nvmlInit()
    except Exception as exc:  # NVMLError_LibraryNotFound, _DriverNotLoaded, ...
        return f"no GPU: NVML finds no driver ({exc})"
    try:
        if pynvml.nvmlDeviceGetCount() < 1:
            return "no GPU: NVML answers but sees no device"
    finally:
        pynvml.nvmlShutdown()
    return None


def pytest_collection_modifyitems(config, items):
    problem = nvml_problem()
    if problem is None:
        return
    skip = pytest.mark.skip(reason=problem)
    for item in items:
        # the marker, not item.keywords: keywords also hold folder names (tests/unit/gpu)
        if item.get_closest_marker("gpu") is not None:
            item.add_marker(skip)
