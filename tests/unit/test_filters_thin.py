"""Filters are thin adapters (docs/CONVENTIONS.md): a filter file maps names to functions of
plugins/plugin_utils or plugins/module_utils, and nothing outside plugins/filter imports it."""

from __future__ import annotations

from tests.loaders import ROOT, imported_names, python_sources

FILTERS = ROOT / "plugins" / "filter"
MAX_LINES = 60
OURS = "sglang_lxc.serving.plugins.filter"


def test_no_module_outside_the_filters_imports_one():
    sources = [p for p in python_sources(ROOT) if FILTERS not in p.parents]
    assert len(sources) > 100
    importers = {str(p.relative_to(ROOT)): sorted(n for n in imported_names(p) if OURS in n)
                 for p in sources}
    assert not {k: v for k, v in importers.items() if v}


def test_every_filter_file_is_short_and_imports_no_other_filter():
    files = sorted(FILTERS.glob("*.py"))
    assert files
    for path in files:
        lines = len(path.read_text().splitlines())
        assert lines < MAX_LINES, (path.name, lines)
        assert not [n for n in imported_names(path) if OURS in n], path.name
