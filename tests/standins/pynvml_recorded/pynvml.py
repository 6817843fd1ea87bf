"""STAND-IN: ``import pynvml`` answered by tests/standins/fake_pynvml.py from the recording named
in FAKE_PYNVML_RECORDING (a tests/unit/gpu/recordings/*.json file), for a process the tests start
with this folder on PYTHONPATH: the lab node's validation read (playbooks/files/node_fit.py),
which has no GPU and no driver. Tests only; never on a real host's path.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import fake_pynvml

_nvml = fake_pynvml.FakeNvml(os.environ["FAKE_PYNVML_RECORDING"])
NVMLError = fake_pynvml.NVMLError


def __getattr__(name):
    return getattr(_nvml, name)
