"""The README's FQCN table lists exactly what the collection ships: playbooks, roles, modules
(and action plugins), filters and the callback."""

from __future__ import annotations

import re

import yaml

from tests.loaders import ROOT, load_file


def table() -> dict[str, set[str]]:
    text = (ROOT / "README.md").read_text()
    rows = dict(re.findall(r"^\| (playbooks|roles|callback|modules|filters) \| (.+) \|$", text,
                           re.M))
    return {kind: {name.split(".")[-1] for name in re.findall(r"`([a-z0-9_.]+)`", cell)}
            for kind, cell in rows.items()}


def shipped_playbooks() -> set[str]:
    ignored = set(yaml.safe_load((ROOT / "galaxy.yml").read_text())["build_ignore"])
    return {p.stem for p in (ROOT / "playbooks").glob("*.yml")
            if f"playbooks/{p.name}" not in ignored}


def filters() -> set[str]:
    names: set[str] = set()
    for path in (ROOT / "plugins" / "filter").glob("*.py"):
        names.update(load_file(f"filters_of_{path.stem}", path).FilterModule().filters())
    return names


def test_the_readme_lists_every_fqcn():
    listed = table()
    assert listed["playbooks"] == shipped_playbooks()
    assert listed["roles"] == {p.name for p in (ROOT / "roles").iterdir() if p.is_dir()}
    assert listed["callback"] == {p.stem for p in (ROOT / "plugins/callback").glob("*.py")}
    assert listed["modules"] == {p.stem for d in ("modules", "action")
                                 for p in (ROOT / "plugins" / d).glob("*.py")}
    assert listed["filters"] == filters()
