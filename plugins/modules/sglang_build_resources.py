#!/usr/bin/python
# Copyright: sglang-lxc contributors
# Apache-2.0
"""Report the CPUs and memory a build may use, as the container itself sees them."""

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sglang_build_resources
short_description: CPUs and available memory from the container's own view (cgroup, lxcfs)
description:
  - Reads the cgroup v2 files (C(cpu.max), C(cpuset.cpus.effective), C(memory.max),
    C(memory.current)) or their cgroup v1 counterparts (C(cpu.cfs_quota_us), C(cpuset.cpus),
    C(memory.limit_in_bytes), C(memory.usage_in_bytes)) of the calling process, the CPU
    affinity mask, and C(/proc/meminfo) (which lxcfs rewrites inside an LXC container).
  - C(cpus) is the smallest of affinity, cpuset and the CFS quota; C(mem_available_bytes) is the
    smaller of MemAvailable and the cgroup limit minus its working set (current usage less the
    inactive file pages of C(memory.stat), which the kernel reclaims first; so the page cache
    of a model read once does not hold a build to one job). Never changes anything.
options:
  root:
    description: Filesystem root the C(/proc) and C(/sys) paths are read under (for tests).
    type: path
    default: /
author:
  - sglang-lxc contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: SGLang | Read the container's CPUs and memory
  sglang_build_resources:
  register: __res
"""

RETURN = r"""
cpus:
  description: CPUs the build may use.
  type: int
  returned: always
mem_available_bytes:
  description: Memory the build may use, in bytes.
  type: int
  returned: always
sources:
  description: Which file decided each value, and the raw figures.
  type: dict
  returned: always
"""

import math
import os

from ansible.module_utils.basic import AnsibleModule

UNLIMITED = 1 << 62  # cgroup v1 reports "no limit" as a huge page-aligned number


def _read(path):
    try:
        with open(path, encoding="ascii") as handle:
            return handle.read().strip()
    except (OSError, UnicodeDecodeError):
        return None


def parse_cpuset(text):
    """Number of CPUs in a cpuset list such as '0-3,8,10-11'."""
    if not text:
        return None
    count = 0
    for part in text.split(","):
        part = part.strip()
        if not part:
            continue
        if "-" in part:
            low, high = part.split("-", 1)
            count += int(high) - int(low) + 1
        else:
            count += 1
    return count or None


def parse_cpu_max(text):
    """CPUs allowed by a cgroup v2 cpu.max line ('max 100000' or '200000 100000')."""
    if not text:
        return None
    fields = text.split()
    if fields[0] == "max" or len(fields) < 2:
        return None
    quota, period = int(fields[0]), int(fields[1])
    if quota <= 0 or period <= 0:
        return None
    return max(1, math.ceil(quota / period))


def parse_meminfo(text):
    """MemAvailable (or MemFree when absent) from /proc/meminfo, in bytes."""
    values = {}
    for line in (text or "").splitlines():
        key, _colon, rest = line.partition(":")
        fields = rest.split()
        if fields and fields[0].isdigit():
            values[key.strip()] = int(fields[0]) * 1024
    return values.get("MemAvailable", values.get("MemFree"))


def inactive_file(text):
    """Inactive file pages of a memory.stat, in bytes: cgroup v1's hierarchical
    total_inactive_file, else inactive_file (v2 counts the subtree); 0 when absent."""
    values = {}
    for line in (text or "").splitlines():
        key, _space, value = line.partition(" ")
        if value.strip().isdigit():
            values[key] = int(value)
    return values.get("total_inactive_file", values.get("inactive_file", 0))


def _limit(text):
    if not text or text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value >= UNLIMITED else value


def _ancestors(base, directory):
    """`directory` and each parent up to `base` (limits on any level apply)."""
    chain = []
    current = os.path.normpath(directory)
    base = os.path.normpath(base)
    while True:
        if os.path.isdir(current):
            chain.append(current)
        if current == base or not current.startswith(base):
            break
        current = os.path.dirname(current)
    return chain or [base]


def cgroup_dirs(root, proc_self_cgroup):
    """(version, {controller: [dirs, innermost first]}) of the calling process's cgroup."""
    base = os.path.join(root, "sys/fs/cgroup")
    v2_rel = None
    v1 = {}
    for line in (proc_self_cgroup or "").splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hier, controllers, rel = parts
        if hier == "0" and controllers == "":
            v2_rel = rel
        for ctrl in controllers.split(","):
            if ctrl:
                v1[ctrl] = rel
    if os.path.exists(os.path.join(base, "cgroup.controllers")):
        chain = _ancestors(base, os.path.join(base, (v2_rel or "/").lstrip("/")))
        return "v2", {"memory": chain, "cpu": chain, "cpuset": chain}

    dirs = {}
    for ctrl, mounts in (
        ("memory", ("memory",)),
        ("cpu", ("cpu,cpuacct", "cpu")),
        ("cpuset", ("cpuset",)),
    ):
        mounted = next(
            (os.path.join(base, m) for m in mounts if os.path.isdir(os.path.join(base, m))),
            os.path.join(base, ctrl),
        )
        dirs[ctrl] = _ancestors(mounted, os.path.join(mounted, v1.get(ctrl, "/").lstrip("/")))
    return "v1", dirs


def _first(dirs, *names):
    for directory in dirs:
        for name in names:
            text = _read(os.path.join(directory, name))
            if text:
                return text
    return None


def _smallest(values):
    values = [v for v in values if v is not None]
    return min(values) if values else None


def probe(root="/", affinity=None):
    """CPUs and memory available to a build under `root`; pure reads, no side effects."""

    def path(rel):
        return os.path.join(root, rel)

    version, dirs = cgroup_dirs(root, _read(path("proc/self/cgroup")))
    sources = {"cgroup": version}

    cpu_candidates = {}
    if affinity is None and root == "/" and hasattr(os, "sched_getaffinity"):
        affinity = len(os.sched_getaffinity(0))
    if affinity:
        cpu_candidates["affinity"] = affinity
    online = parse_cpuset(_read(path("sys/devices/system/cpu/online")))
    if online:
        cpu_candidates["online"] = online
    if version == "v2":
        cpuset = parse_cpuset(_first(dirs["cpuset"], "cpuset.cpus.effective", "cpuset.cpus"))
        quota = _smallest(parse_cpu_max(_read(os.path.join(d, "cpu.max"))) for d in dirs["cpu"])
    else:
        cpuset = parse_cpuset(_first(dirs["cpuset"], "cpuset.effective_cpus", "cpuset.cpus"))
        quotas = []
        for d in dirs["cpu"]:
            q = _read(os.path.join(d, "cpu.cfs_quota_us"))
            p = _read(os.path.join(d, "cpu.cfs_period_us"))
            if q and p and q != "-1":
                quotas.append(parse_cpu_max(f"{q} {p}"))
        quota = _smallest(quotas)
    if cpuset:
        cpu_candidates["cpuset"] = cpuset
    if quota:
        cpu_candidates["quota"] = quota
    if not cpu_candidates:
        cpu_candidates["os.cpu_count"] = os.cpu_count() or 1
    cpu_source = min(cpu_candidates, key=cpu_candidates.get)
    sources["cpus"] = dict(cpu_candidates, decided_by=cpu_source)

    mem_candidates = {}
    meminfo = parse_meminfo(_read(path("proc/meminfo")))
    if meminfo is not None:
        mem_candidates["meminfo"] = meminfo
    limit_name, usage_name = (
        ("memory.max", "memory.current")
        if version == "v2"
        else ("memory.limit_in_bytes", "memory.usage_in_bytes")
    )
    headroom = []
    for d in dirs["memory"]:
        limit = _limit(_read(os.path.join(d, limit_name)))
        if limit is not None:
            usage = _limit(_read(os.path.join(d, usage_name))) or 0
            reclaimable = min(usage, inactive_file(_read(os.path.join(d, "memory.stat"))))
            headroom.append(max(0, limit - (usage - reclaimable)))
            sources.setdefault("cgroup_limit_bytes", limit)
            sources.setdefault("cgroup_inactive_file_bytes", reclaimable)
    if headroom:
        mem_candidates["cgroup"] = min(headroom)
    if not mem_candidates:
        raise ValueError("no memory figure: neither /proc/meminfo nor a cgroup limit is readable")
    mem_source = min(mem_candidates, key=mem_candidates.get)
    sources["mem"] = dict(mem_candidates, decided_by=mem_source)

    return {
        "cpus": cpu_candidates[cpu_source],
        "mem_available_bytes": mem_candidates[mem_source],
        "sources": sources,
    }


def main():
    module = AnsibleModule(
        argument_spec={"root": {"type": "path", "default": "/"}}, supports_check_mode=True
    )
    try:
        result = probe(module.params["root"])
    except (ValueError, OSError) as exc:
        module.fail_json(msg=f"sglang_build_resources: {exc}")
    module.exit_json(changed=False, **result)


if __name__ == "__main__":
    main()
