"""The PCIe fabric of every tensor-parallel group, judged before anything changes.

Tensor parallelism over PCIe is where RTX PRO 6000 boxes hang or crawl in NCCL: the host's IOMMU
and the PCIe ACS of the bridges above the GPUs send peer-to-peer traffic up to the root complex,
or block it there (NCCL's troubleshooting guide; nccl issues 1999, 2079). The node read
(playbooks/files/node_fit.py, once per run) gives, for each pair of the node's GPUs, NVML's P2P
read/write status and common ancestor, the kernel command line, the IOMMU units and each GPU's
IOMMU group type, and the ACS control of the bridges above each GPU (lspci).

For each instance with several GPUs this module gives one finding for the run's checklist
(``kimi-tp8: 8 GPUs, P2P read/write OK, PHB, IOMMU passthrough, ACS redirect off``) and, where
P2P is reported OK but the IOMMU translates or ACS redirects it, the fixes with their cost
("iommu=pt" on the kernel command line, ACS disabled on those bridges, NCCL_P2P_DISABLE=1 in the
group's environment) as a warning, and the NCCL environment chosen from the verdict
(NCCL_P2P_DISABLE=1), unless the inventory sets NCCL_P2P_DISABLE or NCCL_P2P_LEVEL itself in
the instance's env or sglang_serve_env.

Part of the validation pass (action ``sglang_lxc_validate``); unit-tested in
tests/unit/validate/test_validate_fabric.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_sm120 import (
    env_source,
)

# nvidia-smi topo's words, nearest first
LEVELS = ("X", "PIX", "PXB", "PHB", "NODE", "SYS")
# Variables that say how NCCL uses P2P: set by the inventory, they win over the verdict.
NCCL_P2P_VARS = ("NCCL_P2P_DISABLE", "NCCL_P2P_LEVEL")
CHOSEN = {"NCCL_P2P_DISABLE": "1"}
FIX_IOMMU = ('"iommu=pt" on the kernel command line of {node} (cost: a reboot of {node}; the '
             "host's own devices are no longer translated by the IOMMU, VM passthrough keeps "
             "working)")
FIX_ACS = ("ACS disabled on those bridges (setpci -s <bridge> ECAP_ACS+0x6.w=0000 at every boot, "
           "or in the BIOS; cost: the devices below them fall into one IOMMU group and can no "
           "longer be passed to different VMs)")
FIX_NCCL = ("NCCL_P2P_DISABLE=1 in the group's environment (cost: the tensor-parallel all-reduce "
            "goes through host shared memory instead of PCIe peer-to-peer, at a fraction of its "
            "bandwidth)")


def _node_minors(spec_gpus: Any, node_gpus: Sequence[Mapping[str, Any]]) -> list[int]:
    """The node GPUs (minor numbers) the container sees as its GPU 0, 1, ...: those its spec lists
    (all of them for ``all``), in minor-number order (as validate_fit reads them)."""
    if isinstance(spec_gpus, list):
        try:
            return sorted(int(g) for g in spec_gpus)
        except (TypeError, ValueError):
            return []
    return sorted(int(g["minor"]) for g in node_gpus if "minor" in g)


def iommu_mode(fabric: Mapping[str, Any], addresses: Sequence[str]) -> str:
    """off, passthrough or translated (with the group type when the kernel gives one) for the
    GPUs at ``addresses``: their IOMMU group type decides (identity: passthrough; DMA, DMA-FQ:
    translated), else the kernel command line and /sys/class/iommu."""
    groups = fabric.get("iommu_groups") or {}
    types = {groups.get(a) for a in addresses} - {None, ""}
    if types:
        if types == {"identity"}:
            return "passthrough"
        return f"translated ({'/'.join(sorted(types - {'identity'}))})"
    args = str(fabric.get("cmdline") or "").split()
    if not fabric.get("iommu_units") or {"iommu=off", "intel_iommu=off", "amd_iommu=off"} & set(
        args
    ):
        return "off"
    if {"iommu=pt", "iommu.passthrough=1"} & set(args):
        return "passthrough"
    return "translated (the kernel's default domain)"


def redirecting_bridges(fabric: Mapping[str, Any], addresses: Sequence[str]
                        ) -> tuple[list[str], list[str]]:
    """(bridges with ACS redirect on, bridges whose ACS could not be read) among those a group's
    P2P traffic crosses: for each pair, the bridges above either GPU below their common ones."""
    paths = fabric.get("paths") or {}
    acs = fabric.get("acs") or {}
    crossed: set[str] = set()
    for i, a in enumerate(addresses):
        for b in addresses[i + 1:]:
            pa, pb = list(paths.get(a) or []), list(paths.get(b) or [])
            common = 0
            while common < min(len(pa), len(pb)) and pa[common] == pb[common]:
                common += 1
            crossed.update(pa[common:] + pb[common:])
    on, unread = [], []
    for bridge in sorted(crossed):
        if bridge not in acs:
            continue  # no ACS capability: nothing to redirect
        ctl = acs[bridge]
        if ctl is None:
            unread.append(bridge)
        elif "ReqRedir+" in ctl.split() or "CmpltRedir+" in ctl.split():
            on.append(bridge)
    return on, unread


def _levels(pairs: Sequence[Mapping[str, Any]]) -> str:
    seen = {p.get("ancestor") for p in pairs} - {None}
    return "/".join(lv for lv in LEVELS if lv in seen) or "common ancestor unknown"


def group_verdict(name: str, node: str, pairs: Sequence[Mapping[str, Any]],
                  fabric: Mapping[str, Any] | None, addresses: Sequence[str],
                  error: str | None = None) -> dict[str, Any]:
    """{"finding": text, "fixes": [...], "needs_env": bool} of one group of GPUs."""
    count = len(addresses) if addresses else len({g for p in pairs for g in p["gpus"]})
    head = f"{name}: {count} GPUs"
    if not pairs or all(p.get("read") is None and p.get("ancestor") is None for p in pairs):
        why = error or "no NVML answer for the P2P status of its GPUs"
        return {"finding": f"{head}, PCIe fabric not read on {node} ({why})", "fixes": [],
                "needs_env": False}
    statuses = {(p.get("read"), p.get("write")) for p in pairs}
    levels = _levels(pairs)
    if statuses != {("OK", "OK")}:
        worst = sorted({s for pair in statuses for s in pair if s and s != "OK"} or {"unknown"})
        return {"finding": f"{head}, P2P read/write not OK ({'/'.join(worst)}), {levels}: NCCL "
                           "goes through host memory between them", "fixes": [],
                "needs_env": False}
    fabric = fabric or {}
    mode = iommu_mode(fabric, addresses)
    on, unread = redirecting_bridges(fabric, addresses)
    parts = [head, "P2P read/write OK", levels, f"IOMMU {mode}"]
    if on:
        parts.append(f"ACS redirect on {len(on)} bridge(s) above its GPUs ({', '.join(on)})")
    elif unread:
        parts.append(f"ACS not read on {len(unread)} bridge(s) (lspci without root?)")
    elif fabric.get("paths"):
        parts.append("ACS redirect off")
    else:
        parts.append("bridges not read (" + "; ".join(fabric.get("errors") or ["no sysfs"]) + ")")
    finding = ", ".join(parts)
    fixes = []
    if mode.startswith("translated"):
        fixes.append(FIX_IOMMU.format(node=node))
    if on:
        fixes.append(FIX_ACS)
    if fixes:
        fixes.append(FIX_NCCL)
        why = ("the IOMMU translates" if mode.startswith("translated") else "")
        if on:
            why += (" and " if why else "") + "ACS redirects"
        finding += (f": {why} the GPUs' peer-to-peer traffic through the root complex, where "
                    "NCCL hangs or crawls")
    return {"finding": finding, "fixes": fixes, "needs_env": bool(fixes)}


def fabric_findings(
    host: str,
    instances: Sequence[Mapping[str, Any]],
    values: Mapping[str, Any],
    container: Mapping[str, Any] | None,
    fit: Mapping[str, Any] | None,
) -> tuple[list[str], list[str], dict[str, dict[str, str]]]:
    """(warnings, notes, env) of the tensor-parallel groups of one serving container: a note per
    group, a warning with the fixes where P2P is at risk, and the NCCL environment chosen for
    each such group (instance name -> env), unless the inventory sets its own."""
    warnings: list[str] = []
    notes: list[str] = []
    env: dict[str, dict[str, str]] = {}
    if container is None or fit is None:
        return warnings, notes, env
    node = str(container.get("node"))
    spec = container.get("spec") or {}
    node_gpus = fit.get("gpus") or []
    minors = _node_minors(spec.get("gpus", "all"), node_gpus)
    by_minor = {int(g["minor"]): g for g in node_gpus if "minor" in g}
    for instance in instances:
        gpus = list(instance.get("gpus") or [])
        if str(instance.get("device", "cuda")) == "cpu" or len(gpus) < 2:
            continue
        name = str(instance.get("name"))
        group = [minors[g] for g in gpus if 0 <= g < len(minors)]
        addresses = [by_minor[m].get("pci_bus_id") for m in group if m in by_minor]
        addresses = [a for a in addresses if a]
        members = set(group)
        pairs = [p for p in fit.get("p2p") or []
                 if len(p.get("gpus") or []) == 2 and set(p["gpus"]) <= members]
        verdict = group_verdict(name, node, pairs, fit.get("fabric"), addresses,
                                fit.get("error"))
        if not verdict["needs_env"]:
            notes.append(verdict["finding"])
            continue
        own = {k: v for k, v in (instance.get("env") or {}).items() if k in NCCL_P2P_VARS}
        if own:
            chosen = ("kept from the inventory: " + ", ".join(
                f"{k}={v} ({env_source(values, instance, k)})" for k, v in sorted(own.items())))
        else:
            env[name] = dict(CHOSEN)
            chosen = ("chosen until then: NCCL_P2P_DISABLE=1 (set NCCL_P2P_DISABLE or "
                      "NCCL_P2P_LEVEL in the instance's env or sglang_serve_env to choose "
                      "otherwise)")
        text = f"{verdict['finding']}. Fix, one of: {'; '.join(verdict['fixes'])}. NCCL: {chosen}"
        notes.append(text)
        warnings.append(f"{host}: {text}")
    return warnings, notes, env
