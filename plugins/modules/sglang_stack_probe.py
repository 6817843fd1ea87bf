#!/usr/bin/python
"""Read the serving venv's whole state in one call and return its drift against the lock."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_stack_probe
short_description: The serving venv's state against the lock, in one call (read-only)
description:
  - Reads where the public venv path points, that release's completion marker (written last by
    sglang_stack_release, after the release passed its check), and every installed
    distribution's exact version, read by the venv's own python with importlib.metadata.
  - Returns the drift against the lock. C(drifted) is true when the marker is missing or names
    another release, or when a pin is missing, at another version, or a distribution the lock
    lacks is installed (less I(ignore_extra) and the venv's own pip/setuptools/wheel).
  - In the same call it reads the version of the interpreter the lock is for (I(python)) and
    checks the role's other concerns (I(concerns), as module state_probe takes them), such as
    the deploy record, so the role asks its host once.
  - Changes nothing; it runs the same in check mode.
options:
  stack:
    description: Read the venv (false when the role installs no stack; the rest is still read).
    type: bool
    default: true
  python:
    description: Interpreter whose major.minor is returned as C(python_version); empty for none.
    type: str
    default: ""
  concerns:
    description: Further concerns, checked as module state_probe checks them.
    type: list
    elements: dict
    default: []
  venv:
    {description: Public venv path (a symlink to the current release)., type: path, required: true}
  release:
    {description: Name of the release the lock asks for., type: str, required: true}
  pins:
    {description: name==version pins of the lock., type: list, elements: str, required: true}
  ignore_extra:
    description: Distributions installed beside the lock on purpose (a kernel built from source).
    type: list
    elements: str
    default: []
author:
  - sglang-lxc contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Read the serving venv's whole state in one call
  sglang_lxc.serving.sglang_stack_probe:
    stack: true
    venv: /opt/sglang/venv
    release: 0.5.12-1a2b3c4d5e
    pins: [sglang==0.5.12, torch==2.11.0]
    python: /usr/bin/python3
  register: stack
  check_mode: false
"""

RETURN = r"""
drifted:
  {description: Whether anything of the stack must change (false without I(stack))., type: bool,
   returned: always}
link:
  {description: Where the venv path points (null when not a symlink)., type: str,
   returned: when I(stack)}
marker:
  {description: The current release's completion marker (null when none)., type: dict,
   returned: when I(stack)}
release_current:
  {description: The link's release is complete and is the one asked for., type: bool,
   returned: when I(stack)}
missing: {description: Pins not installed., type: list, returned: when I(stack)}
wrong:
  {description: "Pins installed at another version ({pin, found})", type: list,
   returned: when I(stack)}
extra: {description: Installed distributions the lock lacks., type: list, returned: when I(stack)}
versions_from:
  {description: "Where the installed versions were read: marker (the release's check, its
   distributions unchanged since) or venv (the venv's own python).", type: str,
   returned: when the venv exists}
reasons: {description: "Why the stack drifted, one line each.", type: list, returned: always}
python_version:
  {description: "I(python)'s major.minor, null when it does not run or none was given.",
   type: str, returned: always}
state:
  {description: "module state_probe's answer for I(concerns): drift, drifted, records.",
   type: dict, returned: always}
"""

import json
import os
import subprocess

from ansible.module_utils.basic import AnsibleModule
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


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "release": {"type": "str", "required": True},
            "pins": {"type": "list", "elements": "str", "required": True},
            "ignore_extra": {"type": "list", "elements": "str", "default": []},
            "stack": {"type": "bool", "default": True},
            "python": {"type": "str", "default": ""},
            "concerns": {"type": "list", "elements": "dict", "default": []},
        },
        supports_check_mode=True,
    )
    p = module.params
    result = {"drifted": False, "reasons": []}
    if p["stack"]:
        try:
            result = probe(p["venv"].rstrip("/"), p["release"], p["pins"], p["ignore_extra"])
        except (ValueError, subprocess.SubprocessError) as exc:
            module.fail_json(msg=f"could not read the serving venv {p['venv']}: {exc}")

    def runner(argv: list[str]) -> tuple[int, str]:
        rc, out, _err = module.run_command(argv)
        return rc, out

    result["python_version"] = python_version(p["python"])
    result["state"] = probe_concerns(p["concerns"], runner=runner)
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
