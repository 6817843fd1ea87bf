#!/usr/bin/python
# Copyright: sglang-lxc contributors
# Apache-2.0
"""Start again the systemd units that crashed before this run (auto-restart or failed)."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_unit_recover
short_description: Reset and start again the SGLang units that crashed before this run
description:
  - >-
    Reads each unit with C(systemctl show). A unit waiting to auto-restart
    (C(activating/auto-restart)) is reset (C(systemctl reset-failed)) and restarted at once
    (C(systemctl restart): C(start) would wait for its C(RestartSec) hold-off, and
    C(ansible.builtin.systemd_service) counts such a unit as running). A C(failed) unit, its
    start limit hit included, is reset and started (C(systemctl start)).
  - Active, starting and stopped units are left alone (a stopped unit is the play's own start
    task's).
  - >-
    Returns, per unit it started again, what it had been - when it crashed (seconds before this
    run, from C(ExecMainExitTimestampMonotonic)), its exit status or signal, its result and the
    last line its failed invocation logged (C(journalctl _SYSTEMD_INVOCATION_ID=...)) - and a
    line for the run's report, e.g. "restarted: it had crashed 12 s before this run (exit
    status 9); last log: ...". The module sglang_readiness takes the C(recovered) result as its
    C(recovered) option.
  - In check mode it reads the units and reports what it would do (changed for those units),
    and runs nothing else.
options:
  units:
    description: The systemd units to look at, e.g. C(sglang@gpu0.service).
    type: list
    elements: str
    required: true
author:
  - sglang-lxc contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Serve | Start again the instances that crashed before this run
  sglang_lxc.serving.sglang_unit_recover:
    units: [sglang@gpu0.service, sglang@gpu1.service]
  register: __sglang_serve_recover
"""

RETURN = r"""
recovered:
  description: >-
    Per unit started again (or that would be, in check mode): C(action) (restart or start),
    C(state) (ActiveState/SubState found), C(result) (systemd's, e.g. C(signal), C(exit-code),
    C(start-limit-hit)), C(restarts) (NRestarts), C(crashed_s) (seconds before this run, null
    when unknown), C(status) ("exit status 1", or "signal 9 (KILL)"), C(cause) ("exit status 1",
    or "killed by signal 9"), C(last_log), C(summary) (the line without the log) and C(text),
    e.g. "restarted: it had crashed 12 s before this run (exit status 9); last log: ...".
  type: dict
  returned: always
commands:
  description: The systemctl commands run (in check mode, those it would run), in order.
  type: list
  elements: list
  returned: always
msg:
  description: >-
    One C(unit: text) per unit started again (joined with C(; )), or that none had crashed.
  type: str
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_unit_recover import (
    ARGUMENT_SPEC,
    answer,
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    result = answer(module.params["units"], module.check_mode)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
