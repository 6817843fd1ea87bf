"""The runner has one import name (docs/runner.md, "Code"): the sglang-lxc command and the todo
callback reach the same modules, and no code imports it under another."""

from __future__ import annotations

import importlib.metadata
import re
import subprocess
import sys
from pathlib import Path

from tests.loaders import ROOT, imported_names, python_sources

NAME = "ansible_collections.sglang_lxc.serving.runner"


def test_no_code_imports_the_runner_under_another_name():
    sources = python_sources(ROOT)
    wrong = {str(p.relative_to(ROOT)): sorted(n for n in imported_names(p)
                                               if n == "sglang_lxc" or n.startswith("sglang_lxc."))
             for p in sources}
    assert not {k: v for k, v in wrong.items() if v}
    callback = imported_names(ROOT / "plugins" / "callback" / "todo.py")
    assert {f"{NAME}.checklist", f"{NAME}.events", f"{NAME}.planner"} <= callback


def test_no_play_or_script_runs_it_under_another_name():
    """``python -m sglang_lxc.lab_model`` in playbooks/lab.yml outlived the rename once."""
    other = re.compile(r"\bsglang_lxc\.(?!serving\b)[a-z_]+")
    files = [p for p in (*ROOT.glob("playbooks/**/*.yml"), *ROOT.glob("roles/**/*"),
                         *ROOT.glob("scripts/*"), *ROOT.glob(".ci/*"), *ROOT.glob("*.yml"),
                         *ROOT.glob("*.cfg"), *ROOT.glob("*.toml"))
             if p.is_file()]
    assert len(files) > 50
    found = {str(p.relative_to(ROOT)): other.findall(p.read_text(errors="replace"))
             for p in files}
    assert not {k: v for k, v in found.items() if v}


def test_the_command_runs_the_runner_under_that_name():
    """The installed sglang-lxc entry point names the module, and a plain Python process (no
    Ansible collection loader, no pytest path) imports it from this checkout."""
    [script] = [e for e in importlib.metadata.entry_points(group="console_scripts")
                if e.name == "sglang-lxc"]
    assert script.value == f"{NAME}.cli:main"
    found = subprocess.run(
        [sys.executable, "-I", "-c", f"import {NAME}.cli as m; print(m.__file__)"],
        capture_output=True, text=True, check=True, cwd="/",
    ).stdout.strip()
    assert Path(found).resolve() == (ROOT / "runner" / "cli.py").resolve()
