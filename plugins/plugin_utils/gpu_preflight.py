# Copyright: sglang-lxc contributors
# Apache-2.0
"""Preflight verdicts for a serving container, from ``nvml_facts`` output (role gpu_facts).

  gpu_preflight_verdicts(gpu_nvml, checks) -> list of verdicts
  gpu_preflight_failed(verdicts)          -> the verdicts whose status is "fail"
  gpu_preflight_report(verdicts)          -> one line per verdict, for people
  gpu_preflight_summary(verdicts)         -> one line for the runner's checklist

A verdict: ``{"check": name, "status": "pass"|"warn"|"fail"|"skip", "detail": text,
"fix": text or None}``. ``checks`` carries what the inventory expects; see
roles/gpu_facts/meta/argument_specs.yml (gpu_facts_preflight_*) for each key, plus the probes
``uvm_present`` (bool) and ``libcuda`` (the path ``ldconfig -p`` gives for ``libcuda.so.1``, "" when
absent, missing when not probed).
Controller side, plain Python with no Ansible import: the filters of the same names
(plugins/filter/gpu_preflight.py) wrap it, and tests import it directly.
"""

from __future__ import annotations

import math

# Oldest Linux driver for each CUDA major (CUDA release notes, table 3 "toolkit driver
# version"): CUDA 12.0 GA needs >= 525.60.13, CUDA 13.0 GA >= 580.65.06.
DEFAULT_DRIVER_MIN = {"12": "525.60.13", "13": "580.65.06"}

NO_GPU = "no GPU: the inventory expects none on this host (gpu_facts_expected_count: 0)"


def _version_tuple(text):
    parts = []
    for piece in str(text).split("."):
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def _verdict(check, status, detail, fix=None):
    return {
        "check": check,
        "status": status,
        "detail": detail,
        "fix": fix if status in ("fail", "warn") else None,
    }


def _gib(mib):
    return round(mib / 1024, 1)


def _driver_fix(facts):
    if not facts.get("pynvml_available", True):
        return (
            "install nvidia-ml-py for the module (gpu_facts role, gpu_facts_install_enabled: "
            "true) and rerun"
        )
    return (
        "install the NVIDIA userspace driver in the container, the same version as the "
        "host's kernel module and without the module itself "
        "(NVIDIA-Linux-x86_64-<version>.run --no-kernel-module), and pass /dev/nvidia* "
        "through (lxc.cgroup2.devices.allow c 195:* rwm plus the nvidia-uvm major from "
        "/proc/devices, lxc.mount.entry per device node)"
    )


def _gpu_checks(facts, checks):
    verdicts = []
    expected = int(checks.get("expected_count", 0))
    if not facts.get("nvml_available"):
        error = facts.get("nvml_error") or "NVML not available"
        verdicts.append(
            _verdict(
                "nvml",
                "fail",
                f"NVML cannot be read: {error}; expected {expected} GPU(s)",
                _driver_fix(facts),
            )
        )
        for name in ("gpu_count", "compute_capability", "driver"):
            verdicts.append(_verdict(name, "skip", "NVML not available (see nvml)"))
        return verdicts
    verdicts.append(_verdict("nvml", "pass", f"NVML answers, driver {facts.get('driver_version')}"))

    count = int(facts.get("gpu_count") or 0)
    if count == expected:
        verdicts.append(_verdict("gpu_count", "pass", f"{count} GPU(s), as expected"))
    else:
        verdicts.append(
            _verdict(
                "gpu_count",
                "fail",
                f"NVML sees {count} GPU(s), the inventory expects {expected}",
                "pass every /dev/nvidiaN into the container (lxc.mount.entry per node and "
                "lxc.cgroup2.devices.allow c 195:* rwm on the Proxmox node), check nvidia-smi "
                "on the host, or correct gpu_facts_expected_count",
            )
        )

    wanted = [str(c) for c in checks.get("compute_capabilities") or ["12.0"]]
    wrong = [
        f"GPU {g['index']} ({g.get('name')}) is {g.get('compute_capability')}"
        for g in facts.get("gpus", [])
        if str(g.get("compute_capability")) not in wanted
    ]
    if wrong:
        verdicts.append(
            _verdict(
                "compute_capability",
                "fail",
                "; ".join(wrong) + f"; serving is built for {', '.join(wanted)}",
                "serve on GPUs of a listed compute capability, or add this one to "
                "gpu_facts_compute_capabilities and build the kernels for it (sgl-kernel, "
                "flashinfer: TORCH_CUDA_ARCH_LIST)",
            )
        )
    else:
        verdicts.append(_verdict("compute_capability", "pass", f"all GPUs are {', '.join(wanted)}"))

    major = str(checks.get("cuda_major", 13))
    table = {str(k): str(v) for k, v in (checks.get("driver_min") or DEFAULT_DRIVER_MIN).items()}
    minimum = table.get(major)
    driver = facts.get("driver_version")
    cuda_major = facts.get("cuda_driver_major")
    problems = []
    if minimum is None:
        problems.append(f"no minimum driver known for CUDA {major} (gpu_facts_driver_min)")
    elif driver is None or _version_tuple(driver) < _version_tuple(minimum):
        problems.append(f"driver {driver} is older than {minimum}, the minimum for CUDA {major}")
    if cuda_major is not None and int(cuda_major) < int(major):
        problems.append(
            f"the driver supports CUDA up to {facts.get('cuda_driver_version')}, "
            f"serving uses CUDA {major}"
        )
    if problems:
        verdicts.append(
            _verdict(
                "driver",
                "fail",
                "; ".join(problems),
                f"upgrade the host to driver {minimum or '<branch for CUDA ' + major + '>'} or "
                "newer (open kernel modules on Blackwell) and install the same userspace "
                "version in the container",
            )
        )
    else:
        verdicts.append(
            _verdict(
                "driver",
                "pass",
                f"driver {driver} (CUDA {facts.get('cuda_driver_version')}) >= {minimum} "
                f"for CUDA {major}",
            )
        )

    return verdicts


def _uvm_check(checks):
    if checks.get("uvm_present"):
        return _verdict("nvidia_uvm", "pass", "/dev/nvidia-uvm present")
    return _verdict(
        "nvidia_uvm",
        "fail",
        "/dev/nvidia-uvm is missing: CUDA cannot create a context without it",
        "on the Proxmox node run `nvidia-modprobe -u -c=0` (loads nvidia-uvm and makes "
        "the node), then allow its major from /proc/devices "
        "(lxc.cgroup2.devices.allow: c <major>:* rwm) and bind it into the container "
        "(lxc.mount.entry: /dev/nvidia-uvm dev/nvidia-uvm none bind,optional,create=file;"
        " same for nvidia-uvm-tools)",
    )


def _libcuda_check(checks):
    """The driver's libcuda.so.1 as the loader sees it (Triton looks it up with ``ldconfig -p``)."""
    path = checks.get("libcuda")
    if path is None:
        return _verdict("libcuda", "skip", "ldconfig -p not read")
    if path:
        return _verdict("libcuda", "pass", f"libcuda.so.1 => {path} (ldconfig -p)")
    return _verdict(
        "libcuda",
        "fail",
        "libcuda.so.1 is not in the loader cache (ldconfig -p): torch, flashinfer and Triton "
        "cannot load the driver, and Triton's launcher cannot link",
        "install the NVIDIA userspace driver in the container, the same version as the host's "
        "kernel module (NVIDIA-Linux-x86_64-<version>.run --no-kernel-module), or, if it is "
        "installed outside the loader's folders, add that folder to /etc/ld.so.conf.d/ and run "
        "ldconfig; then rerun the toolchain play so $CUDA_HOME/lib64/stubs/libcuda.so links to it",
    )


def _disk_check(facts, checks):
    path = checks.get("model_store_path")
    need_gib = float(checks.get("model_store_min_free_gib") or 0)
    if not path or need_gib <= 0:
        return _verdict(
            "model_store_disk", "skip", "no size asked (gpu_facts_model_store_min_free_gib: 0)"
        )
    disk = ((facts.get("host") or {}).get("disks") or {}).get(path) or {}
    if "free_mib" not in disk:
        return _verdict(
            "model_store_disk",
            "fail",
            f"cannot measure free space for {path}: {disk.get('error', 'not measured')}",
            "create the model store mount point or pass it in gpu_facts_model_store_path",
        )
    free = _gib(disk["free_mib"])
    where = path if disk.get("measured") == path else f"{path} (measured at {disk['measured']})"
    if free >= need_gib:
        return _verdict("model_store_disk", "pass", f"{where}: {free} GiB free >= {need_gib} GiB")
    return _verdict(
        "model_store_disk",
        "fail",
        f"{where}: {free} GiB free, the models need {need_gib} GiB",
        f"free {round(need_gib - free, 1)} GiB there, or mount a bigger volume at {path} "
        "(pct set <vmid> -mpN <storage>:<size>,mp=" + path + ")",
    )


def build_jobs_that_fit(available_mib, reserve_gib, gib_per_thread, threads):
    """sgl-kernel build cap: floor((available - reserve) / (per-thread GiB x nvcc threads))."""
    per_job = float(gib_per_thread) * max(1, int(threads))
    if per_job <= 0:
        return 0
    return max(0, math.floor((available_mib / 1024 - float(reserve_gib)) / per_job))


NO_SOURCE_BUILD = (
    "no source build (sglang_kernel_from_source: false): the lock's sgl-kernel wheel is "
    "installed, nothing is compiled"
)
CAPS_DOC = "docs/build-caps.md"


def _memory_check(facts, checks):
    build = checks.get("build") or {}
    if not build.get("from_source"):
        return _verdict("build_memory", "skip", NO_SOURCE_BUILD)
    jobs = int(build.get("jobs") or 0)
    host = facts.get("host") or {}
    available = host.get("memory_available_mib")
    if available is None:
        return _verdict(
            "build_memory",
            "fail",
            "MemAvailable not readable from /proc/meminfo",
            "check that /proc/meminfo is readable (lxcfs mounted in the container)",
        )
    reserve = float(build.get("reserve_gib", 8))
    per_thread = float(build.get("gib_per_thread", 16))
    threads = int(build.get("threads", 1))
    fit = build_jobs_that_fit(available, reserve, per_thread, threads)
    cpus = int(host.get("cpus") or 0)
    cap = max(1, min(fit, cpus) if cpus > 0 else fit)
    asked = f"{jobs} job(s)" if jobs > 0 else "as many jobs as fit"
    need_gib = round(reserve + max(jobs, 1) * threads * per_thread, 1)
    detail = (
        f"{_gib(available)} GiB available; {asked} x {threads} nvcc thread(s) x "
        f"{per_thread} GiB (the measured peak of one nvcc thread, {CAPS_DOC}) + {reserve} GiB "
        f"reserve; {fit} job(s) fit, the build runs {cap} (MAX_JOBS={cap})"
    )
    if fit >= max(jobs, 1):
        return _verdict("build_memory", "pass", detail)
    more = f"(pct set <vmid> --memory {math.ceil(need_gib * 1024)})"
    if fit >= 1:
        return _verdict(
            "build_memory",
            "warn",
            detail,
            f"the build will run {fit} job(s) and take longer; give the container "
            f"{need_gib} GiB {more} or lower the build jobs to {fit}",
        )
    return _verdict(
        "build_memory",
        "fail",
        detail,
        f"give the container at least {round(reserve + threads * per_thread, 1)} GiB "
        f"available memory {more}, or lower the nvcc threads / reserve (the build would run "
        f"one job anyway and may be killed for memory; {CAPS_DOC})",
    )


def gpu_preflight_verdicts(facts, checks):
    """All verdicts for one host. ``facts``: the ``gpu_nvml`` fact; ``checks``: expectations."""
    facts = facts or {}
    checks = checks or {}
    expected = int(checks.get("expected_count", 0))
    if expected <= 0:
        verdicts = [
            _verdict(name, "skip", NO_GPU)
            for name in (
                "nvml",
                "gpu_count",
                "compute_capability",
                "driver",
                "nvidia_uvm",
                "libcuda",
            )
        ]
    else:
        verdicts = [*_gpu_checks(facts, checks), _uvm_check(checks), _libcuda_check(checks)]
    verdicts.append(_disk_check(facts, checks))
    verdicts.append(_memory_check(facts, checks))
    return verdicts


def gpu_preflight_failed(verdicts):
    return [v for v in verdicts or [] if v.get("status") == "fail"]


def gpu_preflight_summary(verdicts):
    """One line for a checklist: "5 pass, 2 skip (no GPU)" or "1 fail (driver), 6 pass"."""
    parts = []
    for status in ("fail", "warn", "pass", "skip"):
        picked = [v for v in verdicts or [] if v.get("status") == status]
        if not picked:
            continue
        if status in ("fail", "warn"):
            parts.append(f"{len(picked)} {status} ({', '.join(v['check'] for v in picked)})")
        elif status == "skip":
            why = [
                "no GPU" if v["detail"] == NO_GPU else f"{v['check']}: {v['detail'].split(' (')[0]}"
                for v in picked
            ]
            parts.append(f"{len(picked)} skip ({'; '.join(dict.fromkeys(why))})")
        else:
            parts.append(f"{len(picked)} {status}")
    return ", ".join(parts) or "no checks"


def gpu_preflight_report(verdicts):
    lines = []
    for v in verdicts or []:
        line = f"{v['status'].upper():4} {v['check']}: {v['detail']}"
        if v.get("fix"):
            line += f" -> fix: {v['fix']}"
        lines.append(line)
    return lines
