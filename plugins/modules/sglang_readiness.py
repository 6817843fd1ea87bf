#!/usr/bin/python
"""Ansible module: one readiness round over SGLang instances run by systemd."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_readiness
short_description: Tell loading from hung from crashed SGLang instances, one round at a time
description:
  - Polls every instance for at most O(interval) seconds and returns each one's state
    (C(healthy), C(loading), C(warming), C(hung), C(crashed)) with elapsed times, so a play can
    print progress between rounds and call the module again with the returned O(state).
  - C(healthy) needs C(/health) 200 and the served model name listed on C(/v1/models); for an
    invocation of the unit that passed C(/health) before, C(/server_info) 200 (see O(proven_dir)).
  - >-
    For a healthy instance the report says what SGLang resolved for it, read from the same
    C(/server_info) answer (asked once after a C(/health) look): the attention backend (the
    prefill and decode ones where they differ), the MoE runner backend and the quantization, e.g.
    C(attention triton, moe auto, quantization from the checkpoint) (no quantization passed, so
    the checkpoint's config decides). Only those ServerArgs fields are kept, never the answer
    (it holds the API key).
  - C(crashed) when the unit is failed, inactive, waiting to auto-restart, or restarted since the
    first round; the result carries the last log lines from the journal. A unit found crashed
    before the run is started again by module sglang_unit_recover first (see O(recovered)).
  - >-
    The journal's last 200 lines of a crashed or hung instance are matched against known SM120
    failures (module_utils C(sglang_crash_patterns)): CUDA out of memory while capturing CUDA
    graphs, no kernel image for the GPU in a kernel library, NCCL errors in a TP group, DeepGEMM
    asserting on the architecture, Triton out of shared memory, flashinfer's trtllm-gen
    kernels. Each match adds one line C(known failure: <what>; fix: <fix>) after SGLang's own
    lines in the failure message and the report.
  - C(hung) when the process is alive but shows no progress for O(stall_timeout) seconds.
    Progress evidence is any change of port state, HTTP status, number of log lines of the
    current invocation, SGLang's shard progress in them, disk bytes read (and bytes read through
    read calls) by every process of the unit's cgroup, or GPU memory used (NVML, when the driver
    library loads). A slow load that still moves is never hung.
  - While an instance loads it reports load progress, e.g.
    C(loading 43% (235/547 GB, 1.9 GB/s, ETA 2m40s)). The total is the size of the model's
    weight files (those the safetensors index names, else the C(*.safetensors) files of the
    folder, else C(*.bin)/C(*.pt)) plus the draft model's; done is the bytes every process of
    the unit's cgroup read from disk (TP workers are children of the server), plus the bytes
    of the weights that were in the page cache when the wait began (C(fincore)); the rate is taken
    over the last O(rate_window) seconds. SGLang's own shard lines (C(Loading safetensors
    checkpoint shards), C(Multi-thread loading shards)) add C(shards i/n) where the journal has
    them. When the bytes read stay flat and the weights are in the page cache (C(fincore)), it
    says C(cached) instead of a false 0%.
options:
  instances:
    description: Resolved instances (name, unit, port, probe_host, gpus, served_model_name,
      model_path, draft_model_path).
    type: list
    elements: dict
    required: true
  api_key:
    description: Bearer token for C(/v1/models).
    type: str
    default: ""
  interval:
    description: Seconds this call may spend before it returns (one report).
    type: float
    default: 30
  poll:
    description: Seconds between probes inside a call.
    type: float
    default: 1
  stall_timeout:
    description: Seconds without progress before a live instance counts as hung.
    type: float
    default: 900
  timeout:
    description: Seconds since the first round before the whole wait fails.
    type: float
    default: 3600
  state:
    description: The O(state) returned by the previous round; empty on the first round.
    type: dict
    default: {}
  log_lines:
    description: How many log lines to return for a crashed or hung instance.
    type: int
    default: 20
  rate_window:
    description: Seconds of samples the read rate (and so the ETA) is taken over.
    type: float
    default: 10
  proven_dir:
    description:
      - Where the module records, per unit, the systemd invocation (InvocationID) whose
        C(/health) last answered 200, i.e. generated a token. A later look at the same
        invocation asks C(/server_info) instead, which the scheduler's loop answers in
        milliseconds (C(/health) takes a second at the earliest); a restart, a reboot (C(/run)
        is a tmpfs) or any answer but 200 sends the next look to C(/health) again.
      - Empty to ask C(/health) every time.
    type: str
    default: /run/sglang-lxc/readiness
  recovered:
    description:
      - >-
        The units this run started again because they had crashed before it (the C(recovered)
        result of module sglang_unit_recover; a unit's text alone also does). Each one's line in
        the report ends with that text, the summary and C(checklist) name it, and a crash of
        such a unit in this wait is reported as a crash loop ("crash loop: it had crashed
        before this run (exit status 9) and crashed again in this wait: ...").
    type: dict
    default: {}
author:
  - sglang-lxc contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: One round of readiness for every instance (loading, healthy, crashed, hung)
  sglang_lxc.serving.sglang_readiness:
    instances:
      - {name: gpu0, unit: sglang@gpu0.service, port: 30000, model_path: /srv/models/kimi-k2.5}
    interval: 30
    stall_timeout: 600
    timeout: 3600
    state: "{{ previous_round.state | default({}) }}"
  register: previous_round
"""

RETURN = r"""
done:
  description: True once every instance is healthy or any instance crashed or hung or time ran out.
  type: bool
  returned: always
outcome:
  description: C(waiting), C(healthy), C(crashed), C(hung) or C(timeout).
  type: str
  returned: always
report:
  description: Human-readable lines (elapsed time and state per instance).
  type: list
  returned: always
table:
  description: Result table lines (instance, GPU, port, memory, HTTP status, state).
  type: list
  returned: always
verdict:
  description: E.g. "8/8 healthy".
  type: str
  returned: always
summary:
  description: >-
    One line for a checklist, e.g. "7/8 healthy; gpu3 loading 43% (235/547 GB, 1.9 GB/s, ETA
    2m40s)".
  type: str
  returned: always
checklist:
  description: >-
    The verdict, what SGLang resolved for the healthy instances (instances that resolved alike
    together) and what each unit in O(recovered) had been, for the run's checklist, e.g.
    "2/2 healthy; cpu0, cpu1: attention torch_native, moe auto, quantization from the
    checkpoint; cpu0 restarted: it had crashed 12 s before this run (exit status 9)"; the
    verdict alone when nothing of that is known.
  type: str
  returned: always
progress:
  description: >-
    Per instance, as fields - name, state, elapsed_s and, while loading, percent, done_bytes,
    total_bytes, rate_bps, eta_s, shards_done, shards_total, cached, text.
  type: list
  returned: always
instances:
  description: >-
    Per-instance observation and classification; C(progress) holds the load progress as fields
    (percent, done_bytes, total_bytes, rate_bps, eta_s, shards_done, shards_total, cached, text);
    C(recovered) the text of O(recovered) for a unit named there; C(resolved) for a healthy
    instance, what SGLang resolved (attention_backend, prefill_attention_backend,
    decode_attention_backend, moe_runner_backend, quantization); C(log_tail) and
    C(known_failures) (the C(known failure ...; fix ...) lines) for a crashed or hung one.
  type: list
  returned: always
state:
  description: Opaque state to pass to the next round.
  type: dict
  returned: always
"""

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_readiness import (
    ARGUMENT_SPEC,
    answer,
)


def main() -> None:
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    module.exit_json(**answer(**module.params))


if __name__ == "__main__":
    main()
