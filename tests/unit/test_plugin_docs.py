"""Every module's DOCUMENTATION and RETURN parse with ansible-core's own reader (ansible-doc and
ansible-lint use it): a YAML slip there only shows as an [ERROR] line in lint output."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible.parsing.plugin_docs import read_docstring

MODULES = sorted((Path(__file__).resolve().parents[2] / "plugins" / "modules").glob("*.py"))


@pytest.mark.parametrize("path", MODULES, ids=lambda p: p.stem)
def test_module_docs_parse(path: Path) -> None:
    docs = read_docstring(str(path))
    assert docs["doc"], f"{path.name}: DOCUMENTATION missing or not valid YAML"
    assert docs["doc"]["module"] == path.stem
    assert docs["doc"].get("short_description")
    assert isinstance(docs["returndocs"], dict), f"{path.name}: RETURN missing or not valid YAML"
