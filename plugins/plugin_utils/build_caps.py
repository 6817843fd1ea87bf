# Copyright: sglang-lxc contributors
# Apache-2.0
"""Job caps for memory-hungry native builds (sgl-kernel's nvcc compiles).

One formula, used by role `sglang` through the action `sglang_kernel_plan` and documented in
docs/build-caps.md:

    jobs = max(1, min(cpus, floor((mem_available_gib - reserve_gib)
                                  / (per_thread_gib * min(nvcc_threads, archs)))))

`archs` is the number of GPU architectures each nvcc command builds: nvcc's `--threads` runs the
architectures' device compiles in parallel, so more threads than architectures use no more memory
(measured: docs/build-caps.md). 0 leaves the threads as given.

`cpus` and `mem_available` must be the container's own view (cgroup limits, lxcfs), which the
role's `sglang_build_resources` module reads. An explicit override (> 0) wins over the formula.

Controller side, plain Python (ansible is optional: without it the errors are ValueErrors).
Unit-tested in tests/unit/sglang/test_build_caps.py.
"""

from __future__ import annotations

import math
from typing import Any

try:
    from ansible.errors import AnsibleFilterError
except ImportError:  # pragma: no cover - lets the formula be used without ansible installed

    class AnsibleFilterError(ValueError):  # type: ignore[no-redef]
        pass


GIB = 1024**3

# Names of the role variables each argument comes from, so errors name what a user can fix.
DEFAULT_NAMES = {
    "cpus": "cpus",
    "mem_available_bytes": "mem_available_bytes",
    "per_thread_gb": "sglang_kernel_build_per_thread_gb",
    "nvcc_threads": "sglang_kernel_nvcc_threads",
    "reserve_gb": "sglang_kernel_build_reserve_gb",
    "override": "sglang_kernel_max_jobs",
}


def _number(value: Any, name: str, *, minimum: float, allow_equal: bool = False) -> float:
    if isinstance(value, bool):
        raise AnsibleFilterError(f"{name} must be a number, got {value!r}")
    try:
        number = float(value)
    except (TypeError, ValueError):
        raise AnsibleFilterError(f"{name} must be a number, got {value!r}") from None
    if math.isnan(number) or (number < minimum if allow_equal else number <= minimum):
        bound = f">= {minimum:g}" if allow_equal else f"> {minimum:g}"
        raise AnsibleFilterError(f"{name} must be {bound}, got {value!r}")
    return number


def build_job_cap(
    cpus: Any,
    mem_available_bytes: Any,
    per_thread_gb: Any = 4,
    nvcc_threads: Any = 1,
    reserve_gb: Any = 4,
    override: Any = 0,
    names: dict[str, str] | None = None,
    archs: Any = 0,
) -> int:
    """Parallel compile jobs that fit in `mem_available_bytes` and `cpus`.

    per_thread_gb: peak GiB one nvcc thread needs (3-5 on sgl-kernel's heavy files).
    nvcc_threads:  `nvcc --threads` per compile (SGL_KERNEL_COMPILE_THREADS).
    reserve_gb:    GiB kept free for everything else in the container.
    override:      > 0 returns exactly this many jobs; 0 means "compute".
    archs:         architectures per nvcc command (> 0 caps the threads that use memory).
    """
    n = {**DEFAULT_NAMES, **(names or {})}
    cpu_count = _number(cpus, n["cpus"], minimum=0)
    mem = _number(mem_available_bytes, n["mem_available_bytes"], minimum=0)
    per_thread = _number(per_thread_gb, n["per_thread_gb"], minimum=0)
    threads = _number(nvcc_threads, n["nvcc_threads"], minimum=0)
    reserve = _number(reserve_gb, n["reserve_gb"], minimum=0, allow_equal=True)
    forced = _number(override, n["override"], minimum=0, allow_equal=True)
    if forced >= 1:
        return int(forced)
    if archs and float(archs) >= 1:
        threads = min(threads, float(archs))
    usable_gib = mem / GIB - reserve
    by_memory = math.floor(usable_gib / (per_thread * threads))
    return max(1, min(math.floor(cpu_count), by_memory))


def build_job_cap_explain(
    cpus: Any,
    mem_available_bytes: Any,
    per_thread_gb: Any = 4,
    nvcc_threads: Any = 1,
    reserve_gb: Any = 4,
    override: Any = 0,
    archs: Any = 0,
) -> dict[str, Any]:
    """build_job_cap plus the terms that decided it (for logs and findings)."""
    jobs = build_job_cap(
        cpus, mem_available_bytes, per_thread_gb, nvcc_threads, reserve_gb, override, archs=archs
    )
    threads = float(nvcc_threads)
    if archs and float(archs) >= 1:
        threads = min(threads, float(archs))
    usable = float(mem_available_bytes) / GIB - float(reserve_gb)
    by_memory = math.floor(usable / (float(per_thread_gb) * threads))
    if float(override) >= 1:
        limited_by = "override"
    elif by_memory < 1:
        limited_by = "floor"
    elif by_memory < math.floor(float(cpus)):
        limited_by = "memory"
    else:
        limited_by = "cpus"
    return {
        "jobs": jobs,
        "limited_by": limited_by,
        "cpus": int(float(cpus)),
        "mem_available_gib": round(float(mem_available_bytes) / GIB, 1),
        "jobs_by_memory": by_memory,
        "per_thread_gb": float(per_thread_gb),
        "nvcc_threads": int(float(nvcc_threads)),
        "archs": int(float(archs or 0)),
        "reserve_gb": float(reserve_gb),
    }
