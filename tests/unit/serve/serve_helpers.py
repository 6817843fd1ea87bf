"""The sglang_serve pure-logic files from the collection: the instance expansion
(plugin_utils/serve_instances.py), the readiness module and its module_utils."""

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
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import serve_instances

ROOT = Path(__file__).resolve().parents[3]


__all__ = ["ROOT", "load_progress", "probes", "readiness", "serve_instances"]
