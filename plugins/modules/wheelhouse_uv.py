#!/usr/bin/python
"""Put uv's binary on the target from its pinned wheel (no network), once."""

from __future__ import annotations

DOCUMENTATION = r"""
module: wheelhouse_uv
short_description: uv's binary from its pinned wheel, checked against the wheel's sha256
description:
  - Takes C(uv) out of I(wheel) (C(*.data/scripts/uv)) into I(dir), after checking the wheel
    against I(sha256); the binary is written beside and renamed into place. Does nothing when
    I(dir)/uv exists (the folder is named by uv's version).
options:
  wheel: {description: uv's wheel on the target., type: path, required: true}
  sha256: {description: The wheel's sha256 from the tool lock., type: str, required: true}
  dir: {description: Folder of the binary., type: path, required: true}
author:
  - sglang-lxc contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Put uv on the target from its pinned wheel
  sglang_lxc.serving.wheelhouse_uv:
    wheel: >-
      /var/cache/sglang-lxc/node/wheelhouse/sglang-0.5.12/uv-0.13.8-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
    sha256: e18a57b8b352eb7c8feb317b9f6f533c8f0ad9673fd6cf34bbe3cf1a9f6a8984
    dir: /usr/local/lib/sglang-lxc/uv-0.13.8
  register: uv
"""

RETURN = r"""
path: {description: Path of the uv binary., type: str, returned: success}
"""

import os

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang_lxc.serving.plugins.module_utils.uv_tool import ensure_uv


def main() -> None:
    module = AnsibleModule(
        argument_spec={"wheel": {"type": "path", "required": True},
                       "sha256": {"type": "str", "required": True},
                       "dir": {"type": "path", "required": True}},
        supports_check_mode=True,
    )
    p = module.params
    path = f"{p['dir'].rstrip('/')}/uv"
    if module.check_mode:
        module.exit_json(changed=not os.access(path, os.X_OK), path=path)
    try:
        path, changed = ensure_uv(p["wheel"], p["sha256"], p["dir"])
    except (OSError, ValueError) as exc:
        module.fail_json(msg=f"could not take uv out of {p['wheel']}: {exc}")
    module.exit_json(changed=changed, path=path)


if __name__ == "__main__":
    main()
