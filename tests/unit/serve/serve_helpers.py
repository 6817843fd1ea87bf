"""Load the sglang_serve pure-logic files by path (they are not a package)."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def load_file(name: str, path: Path):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


serve_filter = load_file("sglang_serve_filter", ROOT / "plugins/filter/sglang_serve.py")
readiness = load_file("sglang_readiness", ROOT / "roles/sglang_serve/library/sglang_readiness.py")
standin = load_file("sglang_server_standin", ROOT / "tests/standins/sglang_server.py")
