"""Every role-to-role call is declared: docs/CONVENTIONS.md's table and each README's "Calls:".

The calls are read from the roles' tasks (include_role, import_role) and meta/main.yml
(dependencies), so a new call without its documentation fails here.
"""

from __future__ import annotations

import re

import yaml

from tests.loaders import ROOT

ROLES = ROOT / "roles"
KINDS = ("include_role", "import_role")
COLLECTION = "sglang_lxc.serving."


def _tasks(items):
    for task in items or []:
        if not isinstance(task, dict):
            continue
        yield task
        for key in ("block", "rescue", "always"):
            yield from _tasks(task.get(key))


def calls_in_tasks() -> dict[str, dict[str, set[str]]]:
    found: dict[str, dict[str, set[str]]] = {}
    for role in sorted(p for p in ROLES.iterdir() if p.is_dir()):
        calls = found.setdefault(role.name, {})
        for path in sorted((role / "tasks").glob("*.yml")):
            for task in _tasks(yaml.safe_load(path.read_text())):
                for kind in KINDS:
                    spec = task.get(f"ansible.builtin.{kind}") or task.get(kind)
                    if spec:
                        # roles call each other by FQCN; the table names the role
                        name = spec["name"].removeprefix(COLLECTION)
                        calls.setdefault(name, set()).add(kind)
        meta = yaml.safe_load((role / "meta" / "main.yml").read_text()) or {}
        for dep in meta.get("dependencies") or []:
            calls.setdefault(dep if isinstance(dep, str) else dep["role"], set()).add("dependency")
    return found


def documented() -> dict[str, dict[str, set[str]]]:
    text = (ROOT / "docs" / "CONVENTIONS.md").read_text()
    section = text.split("## Role-to-role calls", 1)[1].split("\n## ", 1)[0]
    table: dict[str, dict[str, set[str]]] = {}
    for role, cell in re.findall(r"^\| (\w+) \| (.+?) \|$", section, re.M):
        if role == "role":
            continue
        table[role] = {}
        for callee, kinds in re.findall(r"(\w+) \(([^)]*)\)", cell):
            table[role][callee] = {k.strip() for k in kinds.split(",")}
    return table


def test_the_conventions_table_lists_every_call():
    assert documented() == calls_in_tasks()


def test_no_role_has_meta_dependencies():
    for role, calls in calls_in_tasks().items():
        assert not any("dependency" in kinds for kinds in calls.values()), role


def test_each_readme_names_its_callees():
    for role, calls in calls_in_tasks().items():
        readme = (ROLES / role / "README.md").read_text()
        match = re.search(r"^Calls: (.*?)(?:\n\n|\Z)", readme, re.M | re.S)
        assert match, f"roles/{role}/README.md has no 'Calls:' line"
        named = set(re.findall(r"`(\w+)`", match.group(1)))
        assert named == set(calls), (role, named)
        if not calls:
            assert match.group(1).startswith("none")
