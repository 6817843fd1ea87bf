#!/usr/bin/python
# Copyright: sglang-lxc contributors
# Apache-2.0 (see galaxy.yml)

# Documentation only: the work is done by the action plugin of the same name
# (plugins/action/sglang_lxc_validate.py, checks in plugins/plugin_utils/validate_*.py), on the
# controller.

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_lxc_validate
short_description: One validation pass over every input of a run, before anything changes
description:
  - Checks, for every host of the run, the variables of every role against the roles'
    argument specs (unknown role-prefixed names with "did you mean", types, choices, keys of
    nested entries), the container specs against the live Proxmox nodes (cores, memory, GPU
    indexes, bridge subnets, OS templates, vmids, hostnames and addresses in use), the serving
    instances as M(sglang_lxc.serving.sglang_serve) will expand them, the router, the drain
    settings, the toolchain release, the stack lock, the build caps, whether each instance's
    model (and EAGLE-3 draft) fits the memory it may use (GPU memory from NVML on the node x
    mem_fraction_static, or the container's memory in CPU mode), and the controller (the SSH
    public key to install, the wheelhouse's free space, tools on PATH).
  - "Fails with every problem at once, one line each, as
    C(host: variable = value: what. Fix: ...); changes nothing."
  - Called once (C(run_once)) by the playbook C(sglang_lxc.serving.validate) after it read each
    node's state with C(playbooks/files/node_state.sh).
version_added: 0.1.0
author:
  - sglang-lxc contributors (!UNKNOWN)
options:
  node_states:
    description:
      - Per Proxmox node, the registered result of the node-state read (its C(stdout), or
        C(unreachable) and C(msg)).
    type: dict
    default: {}
  plan:
    description:
      - Only list, per Proxmox node, the model folders (as the node sees them through the
        containers' bind mounts) that the node read should weigh for the fit check; check
        nothing.
    type: bool
    default: false
attributes:
  check_mode:
    support: full
    description: Read-only.
  diff_mode:
    support: none
    description: Reports no diff.
  platform:
    support: full
    platforms: posix
    description: Runs on the controller.
"""

EXAMPLES = r"""
- name: Check every input against the roles, the nodes and the controller
  sglang_lxc.serving.sglang_lxc_validate:
    node_states: "{{ dict(groups['proxmox_nodes'] | zip(groups['proxmox_nodes']
                     | map('extract', hostvars, '__node_state'))) }}"
  run_once: true
"""

RETURN = r"""
problems:
  description: Every problem found, one line each, with host, variable, value and fix.
  type: list
  elements: str
  returned: unless plan
checked:
  description: The nodes and serving hosts that were checked.
  type: dict
  returned: unless plan
notes:
  description:
    - What the fit check found short of a problem, one line each starting with the serving
      host (a model that leaves little room for the KV cache, a model not in the store yet,
      each instance's weights against its memory); the playbook hands them to the run's
      checklist.
  type: list
  elements: str
  returned: unless plan
folders:
  description: Per Proxmox node, the model folders to weigh (node paths).
  type: dict
  returned: with plan
elapsed_s:
  description: Seconds the checks took.
  type: float
  returned: always
"""
