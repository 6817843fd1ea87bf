"""Load the project's plain Python files (filter plugins, module_utils, stand-ins) by path."""

from __future__ import annotations

import ast
import importlib.util
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def load_file(name: str, path: Path):
    """Import ``path`` as module ``name`` (registered in sys.modules)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def imported_names(path: Path) -> set[str]:
    """What a Python file imports, by absolute name: each module, and each module.name of a
    ``from`` import."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module)
            found.update(f"{node.module}.{alias.name}" for alias in node.names)
    return found


def python_sources(root: Path) -> list[Path]:
    """The project's Python files (no virtual environment, collection link or build output)."""
    skip = {".venv", ".collections", ".ansible", "build"}
    return [p for p in root.rglob("*.py") if not skip & set(p.relative_to(root).parts)]
