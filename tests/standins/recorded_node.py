"""STAND-IN for a Proxmox node's /proc and /sys, for tests only: ``materialise(recording, root)``
writes the files playbooks/files/node_fit.py reads for the PCIe fabric (SGLANG_LXC_NODE_ROOT)
from the "fabric" of a tests/unit/gpu/recordings/*.json recording:

- ``proc/cmdline`` from "cmdline";
- ``sys/class/iommu/<unit>`` for each of "iommu_units";
- ``sys/devices/<path>`` for each GPU's "sysfs_paths" (the bridges above it, as folders), and
  ``sys/bus/pci/devices/<gpu>``, a link to it, as the kernel has them;
- ``<gpu>/iommu_group/type`` from "iommu_groups" (identity, DMA, DMA-FQ).

``env(recording, root)`` is the environment a process reading that node needs: the recorded NVML
answers as pynvml (tests/standins/pynvml_recorded), the recorded lspci first on PATH
(tests/standins/lspci_recorded), and SGLANG_LXC_NODE_ROOT.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

STANDINS = Path(__file__).resolve().parent


def materialise(recording: str | Path, root: str | Path) -> Path:
    root = Path(root)
    fabric = json.loads(Path(recording).read_text(encoding="utf-8")).get("fabric") or {}
    (root / "proc").mkdir(parents=True, exist_ok=True)
    (root / "proc/cmdline").write_text(str(fabric.get("cmdline") or "") + "\n")
    (root / "sys/class/iommu").mkdir(parents=True, exist_ok=True)
    for unit in fabric.get("iommu_units") or []:
        (root / "sys/class/iommu" / unit).mkdir(exist_ok=True)
    devices = root / "sys/bus/pci/devices"
    devices.mkdir(parents=True, exist_ok=True)
    for address, path in (fabric.get("sysfs_paths") or {}).items():
        target = root / "sys/devices" / path
        target.mkdir(parents=True, exist_ok=True)
        link = devices / address
        if not link.exists():
            link.symlink_to(os.path.relpath(target, devices))
        kind = (fabric.get("iommu_groups") or {}).get(address)
        if kind:
            (target / "iommu_group").mkdir(exist_ok=True)
            (target / "iommu_group/type").write_text(kind + "\n")
    return root


def env(recording: str | Path, root: str | Path) -> dict[str, str]:
    return {**os.environ,
            "PYTHONPATH": str(STANDINS / "pynvml_recorded"),
            "FAKE_PYNVML_RECORDING": str(recording),
            "PATH": f"{STANDINS / 'lspci_recorded'}{os.pathsep}{os.environ.get('PATH', '')}",
            "SGLANG_LXC_NODE_ROOT": str(root)}
