# Copyright: sglang-lxc contributors
# Apache-2.0
"""The serving venv read against the lock, the target's Python and the role's concerns
(module sglang_stack_probe, documented there; run bare by its action plugin). Read-only."""

from __future__ import annotations

import json
import os
import subprocess

from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_stack import (
    VERSIONS_CODE,
    describe,
    dists_key,
    drift,
    read_marker,
)
from ansible_collections.sglang_lxc.serving.plugins.module_utils.state_probe import (
    probe as probe_concerns,
)
from ansible_collections.sglang_lxc.serving.plugins.module_utils.state_probe import (
    run,
)


def installed_versions(venv: str) -> tuple[dict[str, str] | None, str]:
    python = os.path.join(venv, "bin", "python")
    if not os.path.exists(python):
        return None, f"{python} does not exist"
    proc = subprocess.run([python, "-I", "-c", VERSIONS_CODE], capture_output=True, text=True,
                          timeout=120, check=False)
    if proc.returncode != 0:
        return None, f"{python} failed: {proc.stderr.strip()[-300:]}"
    return json.loads(proc.stdout.strip().splitlines()[-1])["versions"], ""


PYTHON_VERSION_CODE = "import sys; print('%d.%d' % sys.version_info[:2])"


def python_version(python: str) -> str | None:
    if not python:
        return None
    try:
        proc = subprocess.run([python, "-I", "-c", PYTHON_VERSION_CODE], capture_output=True,
                              text=True, timeout=60, check=False)
    except OSError:
        return None
    return proc.stdout.strip() if proc.returncode == 0 else None


def probe(venv: str, release: str, pins: list[str], ignore_extra: list[str]) -> dict:
    link = os.path.realpath(venv) if os.path.islink(venv) else None
    marker = read_marker(link) if link and os.path.isdir(link) else None
    release_current = bool(marker) and marker.get("release") == release
    reasons = []
    if os.path.isdir(venv) and not link:
        reasons.append(f"{venv} is a folder, not a link to a release (an in-place venv)")
    elif not link:
        reasons.append(f"{venv} does not exist")
    elif not marker:
        reasons.append(f"{link} has no completion marker (not a finished release)")
    elif not release_current:
        reasons.append(
            f"{venv} serves release {marker.get('release')}, the lock asks for {release}")
    result = {"link": link, "marker": marker, "release_current": release_current,
              "missing": [], "wrong": [], "extra": []}
    if link or os.path.isdir(venv):
        # the versions the release's check read, while its distributions are as they were then
        # (dists_key); otherwise the venv's own python reads them (about 1 s for 189)
        cached = (marker or {}).get("versions") if release_current else None
        if cached and marker.get("dists") and marker["dists"] == dists_key(link):
            versions, error = cached, ""
            result["versions_from"] = "marker"
        else:
            versions, error = installed_versions(venv)
            result["versions_from"] = "venv"
        if versions is None:
            reasons.append(error)
        else:
            d = drift(pins, versions, ignore_extra)
            result.update(d)
            if d["missing"] or d["wrong"] or d["extra"]:
                reasons.append(describe(d))
    else:
        result["missing"] = list(pins)
    result["reasons"] = reasons
    result["drifted"] = bool(reasons)
    return result


ARGUMENT_SPEC = {
    "venv": {"type": "path", "required": True},
    "release": {"type": "str", "required": True},
    "pins": {"type": "list", "elements": "str", "required": True},
    "ignore_extra": {"type": "list", "elements": "str", "default": []},
    "stack": {"type": "bool", "default": True},
    "python": {"type": "str", "default": ""},
    "concerns": {"type": "list", "elements": "dict", "default": []},
}


def answer(venv: str, release: str, pins: list[str], ignore_extra: list[str] | None = None,
           stack: bool = True, python: str = "", concerns: list[dict] | None = None) -> dict:
    """The module's whole result, for validated arguments."""
    result: dict = {"drifted": False, "reasons": []}
    if stack:
        try:
            result = probe(venv.rstrip("/"), release, pins, ignore_extra or [])
        except (ValueError, subprocess.SubprocessError) as exc:
            return {"failed": True, "msg": f"could not read the serving venv {venv}: {exc}"}
    result["python_version"] = python_version(python)
    result["state"] = probe_concerns(concerns or [], runner=run)
    return {"changed": False, **result}
