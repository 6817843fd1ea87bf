"""STAND-IN for pynvml (nvidia-ml-py), for tests only: no GPU, no driver, no libnvidia-ml.

It answers the handful of NVML calls our code makes from a recording (a dict, usually loaded
from tests/unit/gpu/recordings/*.json), with pynvml's names, return shapes and exception classes
(``NVMLError`` and its ``NVMLError_<Name>`` subclasses, whose ``str()`` is NVML's error text).
Byte counts and the CUDA version integer are as NVML reports them.

Recording format::

    {"init_error": null | "LibraryNotFound" | "DriverNotLoaded" | ...,
     "driver_version": "580.95.05", "cuda_driver_version": 13000,
     "devices": [{"name": ..., "uuid": ..., "minor_number": 0, "pci_bus_id": ...,
                  "compute_capability": [12, 0],
                  "memory": {"total": bytes, "used": bytes, "free": bytes},
                  "utilization": {"gpu": pct, "memory": pct},
                  "pcie": {"gen": 5, "width": 16, "gen_max": 5, "width_max": 16},
                  "compute_processes": [{"pid": 1, "used_memory": bytes or null}],
                  "graphics_processes": [],
                  "errors": {"nvmlDeviceGetUtilizationRates": "NotSupported"}}]}

The PCIe fabric (optional; without it the P2P and topology calls answer NotSupported)::

    "fabric": {"topology": ["<nvidia-smi topo -m header>", "GPU0 X PIX NODE ...", ...],
               "p2p_read": "OK" or [<nvidia-smi topo -p2p r lines>],
               "p2p_write": "OK" or [<nvidia-smi topo -p2p w lines>], ...}

answered by ``nvmlDeviceGetTopologyCommonAncestor`` (PIX 10, PXB 20, PHB 30, NODE 40, SYS 50) and
``nvmlDeviceGetP2PStatus`` (OK 0, CNS 1, GNS 2, TNS 3, DR 4, NS 5, U 6), as NVML numbers them;
GPUs by NVML index. Other keys of "fabric" are for the node's files (sysfs, lspci), not NVML.

``set_memory_used(index, bytes)`` and ``set_processes(index, [...])`` change the answers between
calls (a drain that frees memory); ``calls`` records every call by name.
"""

from __future__ import annotations

import copy
import json
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

# NVML return codes and texts as nvmlErrorString() gives them (pynvml keeps the same table).
_ERRORS = {
    "Uninitialized": (1, "Uninitialized"),
    "InvalidArgument": (2, "Invalid Argument"),
    "NotSupported": (3, "Not Supported"),
    "NoPermission": (4, "Insufficient Permissions"),
    "NotFound": (6, "Not Found"),
    "DriverNotLoaded": (9, "Driver Not Loaded"),
    "GpuIsLost": (15, "GPU is lost"),
    "LibraryNotFound": (12, "NVML Shared Library Not Found"),
    "FunctionNotFound": (13, "Function Not Found"),
    "Unknown": (999, "Unknown Error"),
}


class NVMLError(Exception):
    _texts: ClassVar[dict[int, str]] = {code: text for code, text in _ERRORS.values()}

    def __new__(cls, value=None):
        # like pynvml: NVMLError(code) builds the matching subclass
        if cls is NVMLError and value in _BY_CODE:
            cls = _BY_CODE[value]
        return Exception.__new__(cls)

    def __init__(self, value=None):
        if value is None:
            value = getattr(type(self), "_code", 999)
        self.value = value
        super().__init__(value)

    def __str__(self):
        return self._texts.get(self.value, f"NVML Error with code {self.value}")


_BY_CODE: dict[int, type] = {}
for _name, (_code, _text) in _ERRORS.items():
    _cls = type(f"NVMLError_{_name}", (NVMLError,), {"_code": _code})
    globals()[_cls.__name__] = _cls
    _BY_CODE[_code] = _cls

NVMLError_LibraryNotFound = _BY_CODE[12]
NVMLError_DriverNotLoaded = _BY_CODE[9]
NVMLError_NotSupported = _BY_CODE[3]


# NVML's numbers for the words nvidia-smi topo prints (nvmlGpuTopologyLevel_t, nvmlGpuP2PStatus_t)
TOPOLOGY_LEVELS = {"X": 0, "PIX": 10, "PXB": 20, "PHB": 30, "NODE": 40, "SYS": 50, "SOC": 50}
P2P_STATUS = {"OK": 0, "CNS": 1, "GNS": 2, "TNS": 3, "DR": 4, "NS": 5, "U": 6}


def topo_cell(lines, i, j):
    """The word in row GPU<i>, column GPU<j> of nvidia-smi topo output lines."""
    header = None
    for line in lines:
        words = line.replace("\x1b[4m", "").replace("\x1b[0m", "").split()
        if not words:
            continue
        if header is None and words[0].startswith("GPU"):
            header = [w for w in words if w.startswith("GPU") and w[3:].isdigit()]
            continue
        if header and words[0] == f"GPU{i}" and f"GPU{j}" in header:
            return words[header.index(f"GPU{j}") + 1]
    return None


def load_recording(path):
    return json.loads(Path(path).read_text(encoding="utf-8"))


class FakeNvml:
    """One NVML 'library' loaded with a recording. Use the instance where pynvml would go."""

    NVMLError = NVMLError
    NVMLError_LibraryNotFound = NVMLError_LibraryNotFound
    NVMLError_DriverNotLoaded = NVMLError_DriverNotLoaded
    NVMLError_NotSupported = NVMLError_NotSupported

    def __init__(self, recording):
        if isinstance(recording, (str, Path)):
            recording = load_recording(recording)
        self.recording = copy.deepcopy(recording)
        self.initialised = 0
        self.calls: list[str] = []

    # -- helpers -------------------------------------------------------------------------
    def _raise(self, name):
        raise _BY_CODE[_ERRORS[name][0]]()

    def _check(self, fn):
        self.calls.append(fn)
        if fn != "nvmlInit" and self.initialised <= 0:
            self._raise("Uninitialized")

    def _device(self, handle, fn):
        self._check(fn)
        dev = self.recording["devices"][handle.index]
        err = dev.get("errors", {}).get(fn)
        if err:
            self._raise(err)
        return dev

    def set_memory_used(self, index, used):
        mem = self.recording["devices"][index]["memory"]
        mem["used"], mem["free"] = used, mem["total"] - used

    def set_processes(self, index, processes):
        self.recording["devices"][index]["compute_processes"] = processes

    # -- pynvml API ----------------------------------------------------------------------
    def nvmlInit(self):
        self._check("nvmlInit")
        err = self.recording.get("init_error")
        if err:
            self._raise(err)
        self.initialised += 1

    def nvmlShutdown(self):
        self._check("nvmlShutdown")
        self.initialised -= 1

    def nvmlSystemGetDriverVersion(self):
        self._check("nvmlSystemGetDriverVersion")
        return self.recording["driver_version"]

    def nvmlSystemGetCudaDriverVersion_v2(self):
        self._check("nvmlSystemGetCudaDriverVersion_v2")
        return self.recording["cuda_driver_version"]

    nvmlSystemGetCudaDriverVersion = nvmlSystemGetCudaDriverVersion_v2

    def nvmlDeviceGetCount(self):
        self._check("nvmlDeviceGetCount")
        return len(self.recording["devices"])

    def nvmlDeviceGetHandleByIndex(self, index):
        self._check("nvmlDeviceGetHandleByIndex")
        if not 0 <= index < len(self.recording["devices"]):
            self._raise("InvalidArgument")
        return SimpleNamespace(index=index)

    def nvmlDeviceGetName(self, handle):
        return self._device(handle, "nvmlDeviceGetName")["name"]

    def nvmlDeviceGetUUID(self, handle):
        return self._device(handle, "nvmlDeviceGetUUID")["uuid"]

    def nvmlDeviceGetMinorNumber(self, handle):
        return self._device(handle, "nvmlDeviceGetMinorNumber")["minor_number"]

    def nvmlDeviceGetPciInfo(self, handle):
        return SimpleNamespace(busId=self._device(handle, "nvmlDeviceGetPciInfo")["pci_bus_id"])

    def nvmlDeviceGetCudaComputeCapability(self, handle):
        major, minor = self._device(handle, "nvmlDeviceGetCudaComputeCapability")[
            "compute_capability"
        ]
        return (major, minor)

    def nvmlDeviceGetMemoryInfo(self, handle):
        return SimpleNamespace(**self._device(handle, "nvmlDeviceGetMemoryInfo")["memory"])

    def nvmlDeviceGetUtilizationRates(self, handle):
        dev = self._device(handle, "nvmlDeviceGetUtilizationRates")
        return SimpleNamespace(**dev["utilization"])

    def nvmlDeviceGetCurrPcieLinkGeneration(self, handle):
        return self._device(handle, "nvmlDeviceGetCurrPcieLinkGeneration")["pcie"]["gen"]

    def nvmlDeviceGetCurrPcieLinkWidth(self, handle):
        return self._device(handle, "nvmlDeviceGetCurrPcieLinkWidth")["pcie"]["width"]

    def nvmlDeviceGetMaxPcieLinkGeneration(self, handle):
        return self._device(handle, "nvmlDeviceGetMaxPcieLinkGeneration")["pcie"]["gen_max"]

    def nvmlDeviceGetMaxPcieLinkWidth(self, handle):
        return self._device(handle, "nvmlDeviceGetMaxPcieLinkWidth")["pcie"]["width_max"]

    def _procs(self, handle, fn, key):
        dev = self._device(handle, fn)
        return [
            SimpleNamespace(pid=p["pid"], usedGpuMemory=p.get("used_memory"))
            for p in dev.get(key, [])
        ]

    # -- the PCIe fabric: P2P status and common ancestor of a pair of GPUs ---------------
    NVML_P2P_CAPS_INDEX_READ = 0
    NVML_P2P_CAPS_INDEX_WRITE = 1

    def _fabric(self, fn):
        self._check(fn)
        fabric = self.recording.get("fabric")
        if not fabric:
            self._raise("NotSupported")
        return fabric

    def nvmlDeviceGetTopologyCommonAncestor(self, handle1, handle2):
        fabric = self._fabric("nvmlDeviceGetTopologyCommonAncestor")
        word = topo_cell(fabric["topology"], handle1.index, handle2.index)
        if word not in TOPOLOGY_LEVELS:
            self._raise("NotSupported")
        return TOPOLOGY_LEVELS[word]

    def nvmlDeviceGetP2PStatus(self, handle1, handle2, index):
        fabric = self._fabric("nvmlDeviceGetP2PStatus")
        answer = fabric["p2p_read" if index == self.NVML_P2P_CAPS_INDEX_READ else "p2p_write"]
        word = answer if isinstance(answer, str) else topo_cell(answer, handle1.index,
                                                                  handle2.index)
        return P2P_STATUS.get(word, P2P_STATUS["U"])

    def nvmlDeviceGetComputeRunningProcesses(self, handle):
        return self._procs(handle, "nvmlDeviceGetComputeRunningProcesses", "compute_processes")

    def nvmlDeviceGetGraphicsRunningProcesses(self, handle):
        return self._procs(handle, "nvmlDeviceGetGraphicsRunningProcesses", "graphics_processes")
