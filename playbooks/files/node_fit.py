"""What the fit check reads on a Proxmox node, printed as one JSON line (node_state.sh runs it).

Called as: python3 -c "$(cat node_fit.py)" READER_TEXT FOLDER...

- The GPUs, once, from NVML: pynvml (nvidia-ml-py) where the node's Python has it, else
  ``nvidia-smi``, NVML's own command-line client, which the driver installs. Each GPU's memory,
  compute capability (the SM120 refusals, validate_sm120.py) and PCI address.
- The PCIe fabric between the GPUs (validate_fabric.py): for each pair, NVML's P2P read and
  write status and common ancestor (``nvidia-smi topo -p2p r|w`` and ``topo -m`` without pynvml);
  the IOMMU (``/proc/cmdline``, ``/sys/class/iommu``, each GPU's IOMMU group type); the PCI
  bridges above each GPU (sysfs) and their ACS control (``lspci -D -vvv``, ACSCtl).
- Each FOLDER (a model or EAGLE-3 draft folder, as the node sees the model store): whether it is
  there, and the files and bytes SGLang would load. READER_TEXT is the text of the collection's
  plugins/module_utils/sglang_load_progress.py, the reader load progress weighs the same files
  with: the node has no copy of the collection, so the play passes the file itself.

Changes nothing. SGLANG_LXC_NODE_ROOT (default /) is where /proc and /sys are read: the tests
point it at a recorded tree. Unit-tested in tests/unit/validate/test_validate_fit.py and
test_validate_fabric.py.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import types

MIB = 1024 * 1024
# NVML's P2P status (nvmlGpuP2PStatus_t) and common-ancestor levels (nvmlGpuTopologyLevel_t),
# with the words ``nvidia-smi topo`` prints for them.
P2P_STATUS = {0: "OK", 1: "CNS", 2: "GNS", 3: "TNS", 4: "DR", 5: "NS", 6: "U"}
TOPOLOGY = {0: "X", 10: "PIX", 20: "PXB", 30: "PHB", 40: "NODE", 50: "SYS"}
BDF = re.compile(r"^(?:([0-9a-fA-F]{4,8}):)?([0-9a-fA-F]{2}):([0-9a-fA-F]{2})\.([0-7])$")


def load_reader(text):
    """The reader module from its text."""
    module = types.ModuleType("sglang_load_progress")
    exec(compile(text, "sglang_load_progress.py", "exec"), module.__dict__)
    return module


def bdf(text):
    """A PCI address as sysfs writes it (0000:06:00.0), from NVML's (00000000:06:00.0) or
    lspci's without a domain (06:00.0); None when it is not one."""
    if isinstance(text, bytes):
        text = text.decode("ascii", "replace")
    found = BDF.match(str(text or "").strip())
    if not found:
        return None
    domain = int(found[1] or "0", 16)
    return f"{domain:04x}:{found[2].lower()}:{found[3].lower()}.{found[4]}"


def _nvml_try(nvml, name, *args):
    """An NVML call's answer, None where NVML has no answer (or an older pynvml no call)."""
    try:
        return getattr(nvml, name)(*args)
    except (nvml.NVMLError, AttributeError):
        return None


def nvml_gpus(nvml, pairs=None):
    """[{index, minor, total, compute_capability, pci_bus_id}] from a pynvml-shaped module; with
    ``pairs`` (a list), also each pair's P2P read/write status and common ancestor appended to
    it. Raises its NVMLError."""
    nvml.nvmlInit()
    try:
        gpus, handles = [], []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            try:
                minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
            except nvml.NVMLError:
                minor = index
            total = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            cap = _nvml_try(nvml, "nvmlDeviceGetCudaComputeCapability", handle)
            pci = _nvml_try(nvml, "nvmlDeviceGetPciInfo", handle)
            gpus.append({"index": index, "minor": minor, "total": total,
                         "compute_capability": [int(cap[0]), int(cap[1])] if cap else None,
                         "pci_bus_id": bdf(getattr(pci, "busId", None)) if pci else None})
            handles.append(handle)
        if pairs is not None:
            read = getattr(nvml, "NVML_P2P_CAPS_INDEX_READ", 0)
            write = getattr(nvml, "NVML_P2P_CAPS_INDEX_WRITE", 1)
            for a in range(len(handles)):
                for b in range(a + 1, len(handles)):
                    status = {}
                    for name, index in (("read", read), ("write", write)):
                        got = _nvml_try(nvml, "nvmlDeviceGetP2PStatus", handles[a],
                                        handles[b], index)
                        status[name] = P2P_STATUS.get(got, "U") if got is not None else None
                    level = _nvml_try(nvml, "nvmlDeviceGetTopologyCommonAncestor",
                                      handles[a], handles[b])
                    pairs.append({"gpus": [gpus[a]["minor"], gpus[b]["minor"]], **status,
                                  "ancestor": TOPOLOGY.get(level) if level is not None else None})
        return gpus
    finally:
        nvml.nvmlShutdown()


def smi_gpus(text):
    """[{index, minor, total, compute_capability, pci_bus_id}] from ``nvidia-smi
    --query-gpu=index,memory.total,compute_cap,pci.bus_id --format=csv,noheader,nounits`` (MiB;
    NVML's index order, which is also the minor order of the /dev/nvidia<N> nodes on a usual
    node), or from the two first fields only (a driver without compute_cap)."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
            index = int(parts[0])
            cap = None
            if len(parts) >= 3 and re.fullmatch(r"[0-9]+\.[0-9]+", parts[2]):
                cap = [int(x) for x in parts[2].split(".")]
            gpus.append({"index": index, "minor": index, "total": int(parts[1]) * MIB,
                         "compute_capability": cap,
                         "pci_bus_id": bdf(parts[3]) if len(parts) >= 4 else None})
    return gpus


def smi_matrix(text):
    """{(i, j): word} from ``nvidia-smi topo -m`` or ``topo -p2p r|w``: the GPU rows and columns
    only (i < j)."""
    header, cells = None, {}
    for line in text.splitlines():
        words = line.replace("\x1b[4m", "").replace("\x1b[0m", "").split()
        if not words:
            continue
        if header is None and words[0].startswith("GPU"):
            header = [w for w in words if re.fullmatch(r"GPU[0-9]+", w)]
            continue
        if header and re.fullmatch(r"GPU[0-9]+", words[0]):
            row = int(words[0][3:])
            for position, col in enumerate(header):
                j = int(col[3:])
                if row < j and position + 1 < len(words):
                    cells[(row, j)] = words[position + 1]
    return cells


def _smi(args):
    proc = subprocess.run(["nvidia-smi", *args], capture_output=True, text=True, timeout=30,
                          check=False)
    return proc


def smi_pairs(gpus):
    """The pairs' P2P status and common ancestor from ``nvidia-smi topo``."""
    try:
        topo = smi_matrix(_smi(["topo", "-m"]).stdout)
        read = smi_matrix(_smi(["topo", "-p2p", "r"]).stdout)
        write = smi_matrix(_smi(["topo", "-p2p", "w"]).stdout)
    except (OSError, subprocess.SubprocessError):
        return []
    minors = {g["index"]: g["minor"] for g in gpus}
    return [{"gpus": [minors.get(i, i), minors.get(j, j)], "read": read.get((i, j)),
             "write": write.get((i, j)), "ancestor": topo.get((i, j))}
            for (i, j) in sorted(topo)]


def read_gpus():
    """{"gpus": [...], "p2p": [...], "source": ..., "error": text or None}."""
    try:
        import pynvml
    except ImportError as exc:
        why = f"pynvml not importable ({exc})"
    else:
        try:
            pairs = []
            gpus = nvml_gpus(pynvml, pairs)
            return {"gpus": gpus, "p2p": pairs, "source": "pynvml", "error": None}
        except pynvml.NVMLError as exc:
            why = f"NVML: {type(exc).__name__}: {exc}"
    fields = ["index,memory.total,compute_cap,pci.bus_id", "index,memory.total"]
    for query in fields:
        try:
            proc = _smi([f"--query-gpu={query}", "--format=csv,noheader,nounits"])
        except (OSError, subprocess.SubprocessError) as exc:
            return {"gpus": [], "p2p": [], "source": None, "error": f"{why}; nvidia-smi: {exc}"}
        if proc.returncode == 0:
            gpus = smi_gpus(proc.stdout)
            pairs = smi_pairs(gpus) if len(gpus) > 1 else []
            return {"gpus": gpus, "p2p": pairs, "source": "nvidia-smi", "error": None}
    tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
    return {"gpus": [], "p2p": [], "source": None,
            "error": f"{why}; nvidia-smi exited {proc.returncode}: {tail[0][:200]}"}


def _read(path):
    try:
        with open(path, encoding="utf-8") as handle:
            return handle.read().strip()
    except OSError:
        return None


def lspci_acs(text):
    """{bdf: ACSCtl text} of every device ``lspci -vvv`` shows an ACS control for; a device
    whose capabilities lspci could not read (not root) maps to None."""
    acs, current = {}, None
    for line in text.splitlines():
        if line and not line[0].isspace():
            current = bdf(line.split(" ", 1)[0])
            continue
        if current is None:
            continue
        stripped = line.strip()
        if stripped.startswith("ACSCtl:"):
            acs[current] = " ".join(stripped.split()[1:])
        elif "<access denied>" in stripped and current not in acs:
            acs[current] = None
    return acs


def host_fabric(gpus, root="/"):
    """The node's side of the PCIe fabric of its GPUs: kernel command line, IOMMU units, each
    GPU's IOMMU group type and the PCI bridges above it (sysfs), those bridges' ACS control."""
    fabric = {"cmdline": _read(os.path.join(root, "proc/cmdline")), "errors": []}
    try:
        fabric["iommu_units"] = sorted(os.listdir(os.path.join(root, "sys/class/iommu")))
    except OSError:
        fabric["iommu_units"] = []
    paths, groups, missing = {}, {}, []
    for gpu in gpus:
        address = gpu.get("pci_bus_id")
        if not address:
            continue
        device = os.path.join(root, "sys/bus/pci/devices", address)
        real = os.path.realpath(device)
        if not os.path.exists(real):
            missing.append(address)
            continue
        above = [bdf(part) for part in real.split(os.sep)]
        paths[address] = [p for p in above if p and p != address]
        groups[address] = _read(os.path.join(device, "iommu_group", "type"))
    if missing:
        fabric["errors"].append(f"not in {os.path.join(root, 'sys/bus/pci/devices')}: "
                                + ", ".join(missing))
    fabric["paths"] = paths
    fabric["iommu_groups"] = groups
    bridges = sorted({b for above in paths.values() for b in above})
    fabric["acs"] = {}
    if bridges:
        try:
            proc = subprocess.run(["lspci", "-D", "-vvv"], capture_output=True, text=True,
                                  timeout=60, check=False)
        except (OSError, subprocess.SubprocessError) as exc:
            fabric["errors"].append(f"lspci: {exc}")
        else:
            if proc.returncode != 0:
                fabric["errors"].append(f"lspci exited {proc.returncode}: "
                                        f"{(proc.stderr or '').strip()[-200:]}")
            found = lspci_acs(proc.stdout)
            fabric["acs"] = {b: found[b] for b in bridges if b in found}
    return fabric


def main(argv):
    reader = load_reader(argv[0])
    report = read_gpus()
    if len(report["gpus"]) > 1:
        report["fabric"] = host_fabric(report["gpus"], os.environ.get("SGLANG_LXC_NODE_ROOT", "/"))
    report["folders"] = {folder: reader.folder_weights(folder) for folder in argv[1:]}
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
