"""The arguments of an action plugin that declares them as one dict of defaults (None: required).

Shared by the actions sglang_kernel_sources and sglang_kernel_plan."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail


def task_args(name: str, given: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``defaults`` overlaid with ``given``; a default of None marks a required argument, and
    a required argument left out or empty fails the task naming every such argument."""
    missing = [k for k, v in defaults.items() if v is None and not given.get(k)]
    if missing:
        raise AnsibleActionFail(f"{name}: missing arguments {', '.join(missing)}")
    return {**defaults, **given}
