"""The run's Prometheus targets: what the roles publish, written as ``prometheus_targets.json``.

Roles publish ``ansible.builtin.set_stats`` ``data.prometheus_targets``: ``{host: [entry]}`` (or
a plain list for the host the task ran on), each entry as Prometheus' ``file_sd_configs`` reads
it, ``{"targets": ["10.0.3.200:30000"], "labels": {"job": "sglang", ...}}``
(plugins/plugin_utils/prometheus_targets.py makes them). A report replaces that host's earlier
entries of the same ``job`` (a role that runs twice lists its targets once); other hosts and
jobs are kept. ``prometheus_targets.json`` is the file_sd list of every host's entries, in a
fixed order (host, job, instance, address), every label value a string.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Any

TARGETS_KEY = "prometheus_targets"
TARGETS_JSON = "prometheus_targets.json"
_LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def _entry(value: Any) -> dict[str, Any] | None:
    """A file_sd entry with string targets and string label values; None when it is not one."""
    if not isinstance(value, Mapping):
        return None
    targets = value.get("targets")
    if isinstance(targets, str):
        targets = [targets]
    if not isinstance(targets, list | tuple) or not targets:
        return None
    targets = [str(t) for t in targets if isinstance(t, str | int) and str(t).strip()]
    labels = value.get("labels") or {}
    if not targets or not isinstance(labels, Mapping):
        return None
    clean = {str(k): str(v) for k, v in labels.items()
             if isinstance(k, str) and _LABEL.match(k) and v is not None and v != ""
             and not isinstance(v, Mapping | list | tuple)}
    return {"targets": targets, "labels": clean}


def _key(entry: Mapping[str, Any]) -> tuple[str, ...]:
    labels = entry["labels"]
    return (labels.get("host", ""), labels.get("job", ""), labels.get("sglang_instance", ""),
            entry["targets"][0])


class TargetSet:
    """Every host's published targets; ``update`` says whether the list changed."""

    def __init__(self) -> None:
        self._groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
        self.reported = False  # some role published the key (perhaps an empty list)
        self.ignored = 0  # entries that were not {targets, labels}
        self.version = 0  # one more at each change: the callback rewrites the file then

    def update(self, value: Any, host: str) -> bool:
        """One ``prometheus_targets`` report, from a task that ran on ``host``."""
        if isinstance(value, Mapping) and "targets" not in value:
            reports = {str(h): v for h, v in value.items()}
        else:
            reports = {host: value}
        before = self.entries() if self.reported else None
        self.reported = True
        for where, raw in reports.items():
            if isinstance(raw, Mapping):
                raw = [raw]
            if not isinstance(raw, list | tuple):
                self.ignored += 1
                continue
            jobs: dict[str, list[dict[str, Any]]] = {}
            for item in raw:
                entry = _entry(item)
                if entry is None:
                    self.ignored += 1
                    continue
                entry["labels"].setdefault("host", where)
                jobs.setdefault(entry["labels"].get("job", ""), []).append(entry)
            for job, entries in jobs.items():
                self._groups[(where, job)] = entries
        changed = self.entries() != before
        if changed:
            self.version += 1
        return changed

    def entries(self) -> list[dict[str, Any]]:
        found = [e for group in self._groups.values() for e in group]
        unique = {json.dumps(e, sort_keys=True): e for e in found}
        return sorted(unique.values(), key=lambda e: (*_key(e), json.dumps(e, sort_keys=True)))

    def __bool__(self) -> bool:
        return self.reported

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, TargetSet):
            return NotImplemented
        return self.reported == other.reported and self.entries() == other.entries()

    def __repr__(self) -> str:
        return f"TargetSet({self.entries()!r})"


def render(targets: TargetSet) -> str:
    return json.dumps(targets.entries(), indent=2, sort_keys=True, ensure_ascii=False) + "\n"
