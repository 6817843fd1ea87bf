#!/usr/bin/python
# Copyright: sglang-lxc contributors
# Apache-2.0
"""Read a role's whole state on the host at once and report drift per concern (read-only)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: state_probe
short_description: One read of a role's state on the host, drift reported per concern
description:
  - Checks, in one pass and without changing anything, every concern a role converges (paths,
    links, rendered files by sha1, JSON records, Debian packages, distributions in a venv,
    stray release folders, Python headers, a CUDA tree's links) and returns, per concern, the
    reasons it drifted.
  - The role then includes the tasks of the drifted concerns only, so a converged host costs
    one module run, and check mode and --diff come from the real tasks of what drifted.
  - The check kinds are documented in C(plugins/module_utils/state_probe.py).
options:
  concerns:
    description:
      - The role's concerns in the order they converge. Each is a dict with C(name), optional
        C(enabled) (default true), C(follows) (names of earlier concerns whose drift makes this
        one drift) and check lists C(paths), C(files), C(records), C(debs), C(dists),
        C(strays), C(python_headers), C(cuda_links).
    type: list
    elements: dict
    required: true
  stats:
    description: Paths to report as C(stats) (exists, isdir, isreg, ischr), following links.
    type: list
    elements: path
    default: []
  dpkg_status:
    description: dpkg's status file.
    type: path
    default: /var/lib/dpkg/status
  http:
    description:
      - Requests to make on the host (its own services, no proxy), reported as C(http); a role's
        readiness takes a converged host's answer from here instead of a task of its own. A GET,
        or a POST of O(http[].body) as JSON.
    type: list
    elements: dict
    default: []
    suboptions:
      url:
        description: The URL.
        type: str
        required: true
      name:
        description: The key of its answer in C(http) (default the URL).
        type: str
      body:
        description: A body to POST, sent as JSON (none makes the request a GET).
        type: raw
      headers:
        description: Request headers (kept out of the output, as a key can be one).
        type: dict
        default: {}
      timeout:
        description: Seconds to wait for the answer.
        type: float
        default: 5
author:
  - sglang-lxc contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: CUDA | Read what drifted
  state_probe:
    concerns:
      - name: packages
        debs: [build-essential, python3-dev]
      - name: env
        files:
          - path: /etc/sglang/cuda.env
            sha1: "{{ lookup('ansible.builtin.template', 'cuda.env.j2') | hash('sha1') }}"
            mode: "0644"
  register: __cuda_toolkit_probe
"""

RETURN = r"""
drifted:
  description: Names of the concerns that drifted, in the order given.
  type: list
  returned: always
drift:
  description: Per enabled concern, the reasons it drifted (empty when converged).
  type: dict
  returned: always
stats:
  description: Per path of O(stats), C(exists), C(isdir), C(isreg), C(ischr).
  type: dict
  returned: always
http:
  description: >-
    Per O(http[].name) (default its URL), C(status) (0 when nothing answered), C(json) (the body
    parsed, or null), C(msg) and C(elapsed) (seconds to the whole answer).
  type: dict
  returned: always
records:
  description: The JSON records read (path -> object, null when missing or unreadable).
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang_lxc.serving.plugins.module_utils.state_probe import (
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
