"""The sglang_serve pure-logic files: the filter by path, the readiness module
and its module_utils from the collection."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.sglang_lxc.serving.plugins.module_utils import (
    sglang_load_progress as load_progress,
)
from ansible_collections.sglang_lxc.serving.plugins.module_utils import (
    sglang_readiness as readiness,
)
from ansible_collections.sglang_lxc.serving.plugins.module_utils import (
    sglang_unit_probes as probes,
)

from tests.loaders import load_file

ROOT = Path(__file__).resolve().parents[3]


serve_filter = load_file("sglang_serve_filter", ROOT / "plugins/filter/sglang_serve.py")

__all__ = ["ROOT", "load_progress", "probes", "readiness", "serve_filter"]
