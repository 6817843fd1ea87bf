"""Filters are thin adapters (docs/CONVENTIONS.md): a filter file maps names to functions of
plugins/plugin_utils or plugins/module_utils, and nothing outside plugins/filter imports it."""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
FILTERS = ROOT / "plugins" / "filter"
MAX_LINES = 60
OURS = "sglang_lxc.serving.plugins.filter"


def imports(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def test_no_module_outside_the_filters_imports_one():
    skip = {".venv", ".collections", ".ansible", "build"}
    sources = [p for p in ROOT.rglob("*.py")
               if not skip & set(p.relative_to(ROOT).parts) and FILTERS not in p.parents]
    assert len(sources) > 100
    importers = {str(p.relative_to(ROOT)): sorted(n for n in imports(p) if OURS in n)
                 for p in sources}
    assert not {k: v for k, v in importers.items() if v}


def test_every_filter_file_is_short_and_imports_no_other_filter():
    files = sorted(FILTERS.glob("*.py"))
    assert files
    for path in files:
        lines = len(path.read_text().splitlines())
        assert lines < MAX_LINES, (path.name, lines)
        assert not [n for n in imports(path) if OURS in n], path.name
