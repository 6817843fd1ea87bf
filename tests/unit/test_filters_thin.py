"""Filters are thin adapters (docs/CONVENTIONS.md): a filter file maps names to functions of
plugins/plugin_utils or plugins/module_utils, and nothing outside plugins/filter imports it."""

from __future__ import annotations

import re

from tests.loaders import ROOT, imported_names, load_file, python_sources

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


def registered() -> dict[str, object]:
    names: dict[str, object] = {}
    for path in sorted(FILTERS.glob("*.py")):
        names.update(load_file(f"thin_filters_{path.stem}", path).FilterModule().filters())
    return names


def test_every_filter_is_a_library_function_that_a_play_or_role_uses():
    """A registered name maps to a function of plugin_utils or module_utils (the filter file
    holds no logic of its own), and some role, play or inventory calls it."""
    yaml_text = "\n".join(p.read_text() for pattern in ("roles/**/*.yml", "roles/**/*.j2",
                                                         "playbooks/**/*.yml", "inventory/**/*.yml",
                                                         "*.yml")
                          for p in ROOT.glob(pattern))
    filters = registered()
    assert len(filters) > 20
    for name, function in filters.items():
        module = getattr(function, "__module__", "")
        assert (".plugins.plugin_utils." in module or ".plugins.module_utils." in module), \
            (name, module)
        assert re.search(rf"sglang_lxc\.serving\.{name}\b", yaml_text), name
