#!/usr/bin/python
# Copyright: sglang-lxc contributors
# Apache-2.0 (see galaxy.yml)

# Documentation only: the work is done by the action plugin of the same name
# (plugins/action/proxmox_lxc_probe.py), on the controller and through one shell command on the
# Proxmox node.

from __future__ import annotations

DOCUMENTATION = r"""
module: proxmox_lxc_probe
short_description: The whole state of a Proxmox node's containers, in one read
description:
  - The M(sglang_lxc.serving.proxmox_lxc) role's single probe. On the controller it merges each
    container spec over O(defaults) and checks the specs; a bad spec fails the task before the node
    is asked anything.
  - Then one shell command on the node (no Python module is shipped) prints the node's NVIDIA
    majors and device nodes, its OS templates, the host folders of the mounts, each container's
    config, and, from one C(pct exec) per existing container, whether it runs, has booted, has
    python3, a running sshd, the controller's key and an address.
  - From that it works out, per container, the concerns that drifted from the spec (C(drift)),
    and lists as problems what needs the node's state (templates, container ids held by others,
    GPU indexes).
  - Read-only; it runs in check mode too and never reports a change.
version_added: 0.1.0
author:
  - sglang-lxc contributors (!UNKNOWN)
options:
  containers:
    description: The node's container specs (role variable C(proxmox_lxc_containers)).
    type: list
    elements: dict
    required: true
  defaults:
    description: Values every spec starts from (C(proxmox_lxc_container_defaults)).
    type: dict
    default: {}
  pct:
    description: The C(pct) command on the node.
    type: str
    required: true
  config_dir:
    description: Folder of the containers' configs on the node (C(/etc/pve/lxc)).
    type: path
    required: true
  template_dir:
    description: Folder of the OS templates on the node.
    type: path
    required: true
  recreate:
    description: Names of containers to destroy and create again.
    type: list
    elements: str
    default: []
  ssh_public_key:
    description: The public key the containers must authorize for root (its text).
    type: str
    default: ""
  bootstrap:
    description: Check python3, sshd and the key inside the containers.
    type: bool
    default: true
  memory_floor:
    description: Least memory, in MiB, a container spec may ask for.
    type: int
    default: 512
  boot_timeout:
    description: Seconds a container may take to boot.
    type: int
    default: 120
  shutdown_timeout:
    description: Seconds a container may take to shut down.
    type: int
    default: 180
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
    description: Runs on the controller and, through one shell command, on the Proxmox node.
notes:
  - Pure logic is unit-tested in tests/unit/proxmox_lxc/test_probe.py of the repository.
"""

EXAMPLES = r"""
- name: Read the node's containers and find what drifted
  sglang_lxc.serving.proxmox_lxc_probe:
    containers:
      - {name: ct200, vmid: 200, cores: 16, memory: 65536, gpus: all, ip: 10.0.3.200/24}
    pct: pct
    config_dir: /etc/pve/lxc
    template_dir: /var/lib/vz/template/cache
    ssh_public_key: "{{ lookup('ansible.builtin.file', '~/.ssh/id_ed25519.pub') }}"
  register: probe
"""

RETURN = r"""
containers:
  description: Per container, its merged spec, what drifted and the node's answers about it.
  type: list
  elements: dict
  returned: success
drifted:
  description: Names of the containers with at least one drifted concern.
  type: list
  elements: str
  returned: success
devices:
  description: The node's NVIDIA device nodes.
  type: list
  elements: str
  returned: success
nodes:
  description: The node's facts (NVIDIA majors, templates, mount folders).
  type: dict
  returned: success
gpu_indexes:
  description: Indexes of the node's GPUs.
  type: list
  elements: int
  returned: success
problems:
  description: What the specs ask that the node cannot give, one line each.
  type: list
  elements: str
  returned: always
"""
