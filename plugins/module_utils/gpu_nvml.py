# Copyright: sglang-lxc contributors
# Apache-2.0
"""Read GPUs through NVML and find the processes that hold /dev/nvidia* open.

Pure logic, shared by the ``nvml_facts`` and ``gpu_drain_stop`` modules. Nothing here imports
pynvml at import time: callers pass the module (or a stand-in with the same names) as ``nvml``
(``answer``, the whole of ``nvml_facts``, imports the real one), and
``proc_root`` lets tests point the /proc scan at a fake tree. No Ansible imports either, so
tests load this file directly.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys

# Units whose names end like this are systemd units; the innermost one in a cgroup path owns the
# process (e.g. /system.slice/system-sglang.slice/sglang@0.service -> sglang@0.service).
_UNIT_SUFFIXES = (".service", ".scope")
_NVIDIA_DEV = re.compile(r"^/dev/nvidia(\d+)$")


def _text(value):
    """pynvml returns str in new releases and bytes in old ones."""
    if isinstance(value, bytes):
        return value.decode("utf-8", "replace")
    return value


def _nvml_call(errors, field, func, *args):
    """Call one NVML getter; on NVMLError keep the text in ``errors`` and return None."""
    try:
        return func(*args)
    except Exception as exc:  # NVMLError subclasses differ per pynvml release
        errors[field] = str(exc) or type(exc).__name__
        return None


def _mib(value):
    return None if value is None else int(value) // (1024 * 1024)


def read_cmdline(pid, proc_root="/proc"):
    """Command line of ``pid`` as one string, or None when the pid is not in this namespace."""
    try:
        with open(os.path.join(proc_root, str(pid), "cmdline"), "rb") as handle:
            raw = handle.read()
    except OSError:
        return None
    return raw.replace(b"\0", b" ").decode("utf-8", "replace").strip() or None


def unit_from_cgroup_text(text):
    """systemd unit that owns a process, from the text of /proc/<pid>/cgroup.

    Prefers the cgroup v2 line (``0::/...``), falls back to v1's ``name=systemd`` hierarchy.
    Returns the innermost ``*.service`` or ``*.scope`` component, or None.
    """
    paths = []
    for line in text.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hier, controllers, path = parts
        if hier == "0" and controllers == "":
            paths.insert(0, path)
        elif controllers == "name=systemd":
            paths.append(path)
    for path in paths:
        for component in reversed(path.strip("/").split("/")):
            if component.endswith(_UNIT_SUFFIXES):
                return component
    return None


def unit_of_pid(pid, proc_root="/proc"):
    try:
        with open(os.path.join(proc_root, str(pid), "cgroup"), encoding="utf-8") as handle:
            return unit_from_cgroup_text(handle.read())
    except OSError:
        return None


def _pgid(pid):
    try:
        return os.getpgid(int(pid))
    except (OSError, ValueError):
        return None


def scan_device_holders(proc_root="/proc", exclude_pids=()):
    """Processes with an open /dev/nvidia* handle, found through /proc/<pid>/fd.

    Works where NVML cannot attribute processes (inside an LXC container NVML lists host PIDs,
    or none). Each holder: pid, comm, cmdline, unit, devices (sorted paths) and gpu_minors
    (the N of each /dev/nvidiaN, which NVML reports as the device's minor number).
    Processes we may not read (other users without privilege) are skipped silently.
    """
    holders = []
    excluded = {int(p) for p in exclude_pids}
    try:
        entries = os.listdir(proc_root)
    except OSError:
        return holders
    for entry in entries:
        if not entry.isdigit() or int(entry) in excluded:
            continue
        fd_dir = os.path.join(proc_root, entry, "fd")
        try:
            fds = os.listdir(fd_dir)
        except OSError:
            continue
        devices = set()
        for fd in fds:
            try:
                target = os.readlink(os.path.join(fd_dir, fd))
            except OSError:
                continue
            if target.startswith("/dev/nvidia"):
                devices.add(target)
        if not devices:
            continue
        pid = int(entry)
        try:
            with open(os.path.join(proc_root, entry, "comm"), encoding="utf-8") as handle:
                comm = handle.read().strip()
        except OSError:
            comm = None
        minors = sorted(
            int(m.group(1)) for m in (_NVIDIA_DEV.match(d) for d in devices) if m is not None
        )
        holders.append(
            {
                "pid": pid,
                "comm": comm,
                "cmdline": read_cmdline(pid, proc_root),
                "unit": unit_of_pid(pid, proc_root),
                "devices": sorted(devices),
                "gpu_minors": minors,
            }
        )
    holders.sort(key=lambda h: h["pid"])
    return holders


def _process_list(nvml, handle, errors, holder_pids, proc_root):
    """NVML compute + graphics processes of one GPU, joined with /proc where the pid is ours."""
    procs = {}
    for field, getter in (
        ("compute_processes", "nvmlDeviceGetComputeRunningProcesses"),
        ("graphics_processes", "nvmlDeviceGetGraphicsRunningProcesses"),
    ):
        func = getattr(nvml, getter, None)
        if func is None:
            continue
        listed = _nvml_call(errors, field, func, handle)
        for proc in listed or []:
            pid = int(proc.pid)
            used = getattr(proc, "usedGpuMemory", None)
            entry = procs.setdefault(pid, {"pid": pid, "used_memory_mib": None})
            if used is not None:
                entry["used_memory_mib"] = (entry["used_memory_mib"] or 0) + _mib(used)
    result = []
    for pid in sorted(procs):
        entry = procs[pid]
        # A listed pid is "ours" only when this namespace's process of that pid holds a
        # /dev/nvidia* handle; otherwise it is most likely a host PID seen from a container.
        in_namespace = pid in holder_pids
        entry["in_namespace"] = in_namespace
        entry["cmdline"] = read_cmdline(pid, proc_root) if in_namespace else None
        entry["unit"] = unit_of_pid(pid, proc_root) if in_namespace else None
        result.append(entry)
    return result


def _read_gpu(nvml, index, holder_pids, proc_root):
    errors = {}
    handle = nvml.nvmlDeviceGetHandleByIndex(index)
    gpu = {"index": index}
    gpu["name"] = _text(_nvml_call(errors, "name", nvml.nvmlDeviceGetName, handle))
    gpu["uuid"] = _text(_nvml_call(errors, "uuid", nvml.nvmlDeviceGetUUID, handle))
    gpu["minor_number"] = _nvml_call(errors, "minor_number", nvml.nvmlDeviceGetMinorNumber, handle)
    pci = _nvml_call(errors, "pci", nvml.nvmlDeviceGetPciInfo, handle)
    gpu["pci_bus_id"] = _text(getattr(pci, "busId", None)) if pci is not None else None
    cc = _nvml_call(errors, "compute_capability", nvml.nvmlDeviceGetCudaComputeCapability, handle)
    gpu["compute_capability"] = f"{cc[0]}.{cc[1]}" if cc else None
    mem = _nvml_call(errors, "memory", nvml.nvmlDeviceGetMemoryInfo, handle)
    gpu["memory_total_mib"] = _mib(getattr(mem, "total", None)) if mem is not None else None
    gpu["memory_used_mib"] = _mib(getattr(mem, "used", None)) if mem is not None else None
    util = _nvml_call(errors, "utilization", nvml.nvmlDeviceGetUtilizationRates, handle)
    gpu["utilization_gpu_pct"] = getattr(util, "gpu", None) if util is not None else None
    gpu["utilization_memory_pct"] = getattr(util, "memory", None) if util is not None else None
    gpu["pcie_gen"] = _nvml_call(
        errors, "pcie_gen", nvml.nvmlDeviceGetCurrPcieLinkGeneration, handle
    )
    gpu["pcie_width"] = _nvml_call(
        errors, "pcie_width", nvml.nvmlDeviceGetCurrPcieLinkWidth, handle
    )
    gpu["pcie_gen_max"] = _nvml_call(
        errors, "pcie_gen_max", nvml.nvmlDeviceGetMaxPcieLinkGeneration, handle
    )
    gpu["pcie_width_max"] = _nvml_call(
        errors, "pcie_width_max", nvml.nvmlDeviceGetMaxPcieLinkWidth, handle
    )
    gpu["processes"] = _process_list(nvml, handle, errors, holder_pids, proc_root)
    gpu["errors"] = errors
    return gpu


def _cuda_version_text(value):
    """NVML encodes the CUDA driver version as 1000*major + 10*minor (13000 -> "13.0")."""
    if value is None:
        return None
    return f"{value // 1000}.{(value % 1000) // 10}"


def collect(nvml, proc_root="/proc", exclude_pids=(), import_error=None):
    """Everything NVML and /proc say about this host's GPUs, as plain data.

    ``nvml`` is pynvml or a stand-in; None means pynvml could not be imported (``import_error``
    says why). Never raises on NVML errors: a missing library or driver yields ``gpus: []`` and
    the NVML text in ``nvml_error``.
    """
    holders = scan_device_holders(proc_root, exclude_pids)
    facts = {
        "pynvml_available": nvml is not None,
        "nvml_available": False,
        "nvml_error": None,
        "driver_version": None,
        "cuda_driver_version": None,
        "cuda_driver_major": None,
        "gpu_count": 0,
        "gpus": [],
        "holders": holders,
    }
    if nvml is None:
        facts["nvml_error"] = f"pynvml not importable: {import_error or 'unknown reason'}"
        return facts
    try:
        nvml.nvmlInit()
    except Exception as exc:
        facts["nvml_error"] = f"{type(exc).__name__}: {exc}"
        return facts
    try:
        facts["nvml_available"] = True
        facts["driver_version"] = _text(nvml.nvmlSystemGetDriverVersion())
        getter = (
            getattr(nvml, "nvmlSystemGetCudaDriverVersion_v2", None)
            or nvml.nvmlSystemGetCudaDriverVersion
        )
        cuda = _nvml_call({}, "cuda", getter)
        facts["cuda_driver_version"] = _cuda_version_text(cuda)
        facts["cuda_driver_major"] = None if cuda is None else cuda // 1000
        holder_pids = {h["pid"] for h in holders}
        count = nvml.nvmlDeviceGetCount()
        facts["gpus"] = [_read_gpu(nvml, i, holder_pids, proc_root) for i in range(count)]
        facts["gpu_count"] = count
    except Exception as exc:
        facts["nvml_error"] = f"{type(exc).__name__}: {exc}"
    finally:
        # shutting down a half-initialised library must not hide the facts
        with contextlib.suppress(Exception):
            nvml.nvmlShutdown()
    return facts


def host_resources(paths=(), meminfo="/proc/meminfo"):
    """Memory (the container's lxcfs view of /proc/meminfo), usable CPUs, free disk per path.

    For a path that does not exist yet, the nearest existing parent is measured (the model store
    may be created later on the same file system).
    """
    mem = {}
    try:
        with open(meminfo, encoding="utf-8") as handle:
            for line in handle:
                key, _colon, rest = line.partition(":")
                fields = rest.split()
                if fields and key in ("MemTotal", "MemAvailable"):
                    mem[key] = int(fields[0]) // 1024
    except OSError:
        pass
    try:
        cpus = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cpus = os.cpu_count()
    disks = {}
    for path in paths:
        probe = path
        while probe and not os.path.exists(probe):
            parent = os.path.dirname(probe.rstrip("/")) or "/"
            if parent == probe:
                break
            probe = parent
        try:
            st = os.statvfs(probe)
        except OSError as exc:
            disks[path] = {"measured": probe, "error": str(exc)}
            continue
        disks[path] = {
            "measured": probe,
            "free_mib": st.f_bavail * st.f_frsize // (1024 * 1024),
            "total_mib": st.f_blocks * st.f_frsize // (1024 * 1024),
        }
    return {
        "memory_total_mib": mem.get("MemTotal"),
        "memory_available_mib": mem.get("MemAvailable"),
        "cpus": cpus,
        "disks": disks,
    }


# The module nvml_facts's arguments; its action plugin applies them on the controller.
ARGUMENT_SPEC = {"disk_paths": {"type": "list", "elements": "str", "default": []}}


def answer(disk_paths=()):
    """The module nvml_facts's whole result: pynvml as this interpreter imports it, the GPUs,
    their holders and the host's resources (the module and the action's bare run both return
    this)."""
    try:
        import pynvml as nvml

        import_error = None
    except ImportError as exc:
        nvml, import_error = None, str(exc)
    # our own process (and its parent: the Ansible wrapper or the shell) never counts as a holder
    facts = collect(nvml, exclude_pids=(os.getpid(), os.getppid()), import_error=import_error)
    facts["host"] = host_resources(disk_paths)
    facts["python"] = sys.executable
    return {"changed": False, "ansible_facts": {"gpu_nvml": facts}}
