#!/usr/bin/python
"""Read a wheel folder: which of the set's wheels it lacks, its free space, whether read-only."""

from __future__ import annotations

DOCUMENTATION = r"""
module: wheelhouse_files
short_description: What a wheel folder lacks of a set, in one read (read-only)
description:
  - Compares the C(.whl) files of I(path) with the set's wheels by name and size, and reads the
    free space and the read-only flag of the filesystem that holds I(path) (a node cache mounted
    read-only into a container reads as read-only). Changes nothing; runs in check mode.
options:
  path: {description: The wheel folder., type: path, required: true}
  want:
    description: The set's wheels, each C({name, size}).
    type: list
    elements: dict
    required: true
author:
  - sglang-lxc contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: What the node's wheel folder lacks of the stack's set
  sglang_lxc.serving.wheelhouse_files:
    path: /var/lib/sglang-lxc/wheelhouse/sglang-0.5.12
    want:
      - {name: torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl, size: 899883315}
  register: folder
  check_mode: false
"""

RETURN = r"""
exists: {description: Whether the folder exists., type: bool, returned: always}
missing:
  {description: Names of the wheels it lacks (or holds at another size)., type: list,
   returned: always}
missing_bytes: {description: Their total size., type: int, returned: always}
free_bytes: {description: Free bytes on the folder's filesystem., type: int, returned: always}
mount: {description: Mount point of that filesystem., type: str, returned: always}
read_only:
  {description: Whether that filesystem is mounted read-only., type: bool, returned: always}
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang_lxc.serving.plugins.module_utils.wheelhouse_sets import folder_state


def main() -> None:
    module = AnsibleModule(
        argument_spec={"path": {"type": "path", "required": True},
                       "want": {"type": "list", "elements": "dict", "required": True}},
        supports_check_mode=True,
    )
    module.exit_json(changed=False, **folder_state(module.params["path"], module.params["want"]))


if __name__ == "__main__":
    main()
