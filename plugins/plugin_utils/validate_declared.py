"""What the roles and plays declare, read from their files: argument specs, defaults, vars,
the facts roles set, and the values the plays pass to each role.

Part of the validation pass (action ``sglang_lxc_validate``); unit-tested in tests/unit/validate.
"""

from __future__ import annotations

import copy
import functools
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_common import (
    PLAY_LEVEL_VARS,
)

# The collection's root: its roles and playbooks are read from here.
COLLECTION_ROOT = Path(__file__).resolve().parents[2]
ROLES_DIR = COLLECTION_ROOT / "roles"
PLAYBOOKS_DIR = COLLECTION_ROOT / "playbooks"
# Roles are called by FQCN in the plays; the name without it is the role's folder.
COLLECTION_PREFIX = "sglang_lxc.serving."

_LOADER = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


@functools.cache
def _read_yaml_cached(path: Path) -> Any:
    try:
        return yaml.load(path.read_text(), Loader=_LOADER) or {}  # CSafeLoader: safe
    except (OSError, yaml.YAMLError):
        return {}


def _read_yaml(path: Path) -> Any:
    """A role or play file, parsed once per run (callers must not change the result)."""
    return copy.deepcopy(_read_yaml_cached(path))


def role_specs(roles_dir: Path = ROLES_DIR) -> dict[str, dict[str, dict]]:
    """``{role: {variable: option spec}}`` from every entry point of each role's argument_specs."""
    out: dict[str, dict[str, dict]] = {}
    for role in sorted(p.name for p in roles_dir.iterdir() if p.is_dir()):
        specs = _read_yaml(roles_dir / role / "meta" / "argument_specs.yml")
        options: dict[str, dict] = {}
        for entry in (specs.get("argument_specs") or {}).values():
            for name, option in ((entry or {}).get("options") or {}).items():
                options.setdefault(name, option or {})
        out[role] = options
    return out


def role_defaults(roles_dir: Path = ROLES_DIR) -> dict[str, dict[str, Any]]:
    return {
        p.name: _read_yaml(p / "defaults" / "main.yml")
        for p in sorted(roles_dir.iterdir())
        if p.is_dir()
    }


def role_vars(roles_dir: Path = ROLES_DIR) -> dict[str, dict[str, Any]]:
    return {
        p.name: _read_yaml(p / "vars" / "main.yml")
        for p in sorted(roles_dir.iterdir())
        if p.is_dir() and (p / "vars" / "main.yml").is_file()
    }


_FACT_NAME = re.compile(r"^\s*(?:register:\s*|)([a-z][a-z0-9_]*)\s*:", re.M)


def role_public_facts(roles_dir: Path = ROLES_DIR) -> set[str]:
    """Public names a role sets at run time (set_fact keys, register names without ``__``)."""
    names: set[str] = set()
    for path in roles_dir.glob("*/tasks/*.yml"):
        tasks = _read_yaml(path)
        for task in tasks if isinstance(tasks, list) else []:
            if not isinstance(task, Mapping):
                continue
            registered = task.get("register")
            if isinstance(registered, str):
                names.add(registered)
            facts = task.get("ansible.builtin.set_fact") or task.get("set_fact")
            if isinstance(facts, Mapping):
                names.update(k for k in facts if k != "cacheable")
    return {n for n in names if not n.startswith("_")}


def role_name(name: str) -> str:
    """A role's folder name from the name a play calls it by (FQCN or short)."""
    return name.removeprefix(COLLECTION_PREFIX)


def play_role_vars(playbooks_dir: Path = PLAYBOOKS_DIR) -> dict[str, dict[str, Any]]:
    """Values the plays pass to each role (``roles: - role: x, vars: ...`` and import_role)."""
    out: dict[str, dict[str, Any]] = {}
    for path in sorted(playbooks_dir.glob("*.yml")):
        plays = _read_yaml(path)
        for play in plays if isinstance(plays, list) else []:
            if not isinstance(play, Mapping):
                continue
            for entry in play.get("roles") or []:
                if isinstance(entry, Mapping) and entry.get("role"):
                    params = dict(entry.get("vars") or {})
                    params.update({k: v for k, v in entry.items() if k not in ("role", "vars")})
                    out.setdefault(role_name(entry["role"]), {}).update(params)
            for task in (play.get("tasks") or []) + (play.get("pre_tasks") or []):
                for key in ("ansible.builtin.import_role", "ansible.builtin.include_role"):
                    spec = task.get(key) if isinstance(task, Mapping) else None
                    if isinstance(spec, Mapping) and spec.get("name"):
                        out.setdefault(role_name(spec["name"]), {}).update(task.get("vars") or {})
    return out


def declared_names(roles_dir: Path = ROLES_DIR) -> set[str]:
    names: set[str] = set(PLAY_LEVEL_VARS)
    for options in role_specs(roles_dir).values():
        names.update(options)
    for defaults in role_defaults(roles_dir).values():
        names.update(defaults)
    names.update(role_public_facts(roles_dir))
    return names
