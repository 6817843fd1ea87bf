# Copyright: sglang-lxc contributors
# Apache-2.0
"""The gpu_drain role's judgement on the controller: has the GPU memory come back, and a
one-line summary.

  memory_state(after, before, drain, idle_mib=1024) -> {released, waiting, freed_mib, watched}
  summary(drain, memory=None, memory_skip_reason=None) -> "2 processes stopped (...)"
  memory_skip(drain, before, check_mode, wait_seconds, nvml_enabled) -> "" or why the wait is
                                                                        skipped

``after``/``before`` are ``gpu_nvml`` facts (nvml_facts), ``drain`` the gpu_drain_stop result.
Controller side, plain Python: the filters gpu_drain_memory_state, gpu_drain_summary and
gpu_drain_memory_skip (plugins/filter/gpu_drain.py) wrap them; tests/unit/gpu imports it
directly. What the drain stops, on the target, is plugins/module_utils/gpu_drain_plan.py.
"""

from __future__ import annotations


def memory_state(after, before, drain, idle_mib=1024):
    """Has the GPU memory of what the drain stopped been released?

    after/before: gpu_nvml facts; drain: the gpu_drain_stop result. The GPUs watched are the
    ones the stopped processes held open (/dev/nvidiaN minors, known even inside LXC) plus
    those where NVML listed a stopped pid; with neither known, every GPU. A watched GPU is
    released when NVML lists none of the stopped pids on it and, unless a process we did not
    stop also holds it, its used memory is at most ``idle_mib``.
    Returns {"released": bool, "waiting": [text], "freed_mib": int, "watched": [index]}.
    """
    stopped = [*drain.get("stopped", []), *drain.get("killed", [])]
    stopped_pids = {p for t in stopped for p in t.get("pids", [])}
    stopped_minors = {m for t in stopped for m in t.get("gpu_minors", [])}
    # GPUs that processes we did not stop also hold: their memory stays in use
    shared = {m for k in drain.get("other_holders", []) for m in k.get("gpu_minors", [])}
    gpus_after = {g["index"]: g for g in after.get("gpus", [])}
    gpus_before = {g["index"]: g for g in before.get("gpus", [])}
    watched = set()
    for index, gpu in gpus_before.items():
        if gpu.get("minor_number") in stopped_minors or any(
            p["pid"] in stopped_pids for p in gpu.get("processes", [])
        ):
            watched.add(index)
    if not watched and stopped:
        watched = set(gpus_before)
    waiting = []
    for index in sorted(watched):
        gpu = gpus_after.get(index)
        if gpu is None:
            waiting.append(f"GPU {index}: NVML no longer lists it")
            continue
        still = [p["pid"] for p in gpu.get("processes", []) if p["pid"] in stopped_pids]
        used = gpu.get("memory_used_mib") or 0
        if still:
            waiting.append(f"GPU {index}: NVML still lists pid(s) {still}")
        elif gpu.get("minor_number") not in shared and used > idle_mib:
            waiting.append(f"GPU {index}: {used} MiB used (released at <= {idle_mib} MiB)")
    freed = 0
    for index, gpu in gpus_before.items():
        after_used = (gpus_after.get(index) or {}).get("memory_used_mib")
        if after_used is not None and gpu.get("memory_used_mib") is not None:
            freed += max(0, gpu["memory_used_mib"] - after_used)
    return {
        "released": not waiting,
        "waiting": waiting,
        "freed_mib": freed,
        "watched": sorted(watched),
    }


def memory_skip(drain, before, check_mode=False, wait_seconds=120, nvml_enabled=True):
    """Why the memory wait cannot run, or "" when it can (the first reason that applies)."""
    drain = drain or {}
    before = before or {}
    stopped = [*drain.get("stopped", []), *drain.get("killed", [])]
    if check_mode:
        return "check mode: nothing was stopped"
    if not stopped:
        return "nothing was stopped"
    if int(wait_seconds) == 0:
        return "gpu_drain_memory_wait_seconds is 0"
    if not nvml_enabled:
        return "gpu_drain_nvml_enabled is false"
    if not before.get("nvml_available", False):
        return f"no NVML ({before.get('nvml_error')})"
    if int(before.get("gpu_count") or 0) == 0:
        return "NVML sees no GPU"
    return ""


def summary(drain, memory=None, memory_skip_reason=None):
    """One line for the runner's checklist: "2 processes stopped, 180.0 GiB freed"."""
    stopped = [*drain.get("stopped", []), *drain.get("killed", [])]
    pids = sum(len(t.get("pids", [])) for t in stopped)
    parts = []
    if stopped:
        names = ", ".join(t.get("unit") or f"pgid {t.get('pgid')}" for t in stopped)
        parts.append(f"{pids} process{'es' if pids != 1 else ''} stopped ({names})")
    else:
        parts.append("nothing to stop")
    if drain.get("killed"):
        parts.append(f"{len(drain['killed'])} SIGKILLed (gpu_drain_force)")
    if drain.get("left_running"):
        names = ", ".join(t.get("unit") or f"pgid {t.get('pgid')}" for t in drain["left_running"])
        parts.append(f"left running: {names}")
    if memory is not None:
        parts.append(f"{round(memory['freed_mib'] / 1024, 1)} GiB freed")
    elif memory_skip_reason and stopped:
        parts.append(f"memory wait skipped: {memory_skip_reason}")
    return ", ".join(parts)
