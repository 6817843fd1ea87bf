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

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_stack_probe import (
    ARGUMENT_SPEC,
    answer,
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result = answer(**module.params)
    if result.get("failed"):
        module.fail_json(**{k: v for k, v in result.items() if k != "failed"})
    module.exit_json(**result)


if __name__ == "__main__":
    main()
