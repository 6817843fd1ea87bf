"""Load the sglang_serve pure-logic files by path (they are not a package)."""

from __future__ import annotations

from pathlib import Path

from tests.loaders import load_file

ROOT = Path(__file__).resolve().parents[3]


serve_filter = load_file("sglang_serve_filter", ROOT / "plugins/filter/sglang_serve.py")
readiness = load_file("sglang_readiness", ROOT / "plugins/modules/sglang_readiness.py")
standin = load_file("sglang_server_standin", ROOT / "tests/standins/sglang_server.py")
