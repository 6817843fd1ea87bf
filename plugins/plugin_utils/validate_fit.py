"""Does each instance's model fit the memory it may use? Checked before anything changes.

The weights are weighed on the Proxmox node, which holds the model store (a bind mount of the
container): playbooks/files/node_fit.py runs there inside the node read (node_state.sh), with
the reader load progress uses (module_utils/sglang_load_progress.py), and also reads each GPU's
memory from NVML once. This module turns that read into problems and checklist notes:

- GPU mode: an instance may use ``len(gpus) x GPU memory x mem_fraction_static``; weights
  (model plus EAGLE-3 draft) above that are an error naming the smallest tp that fits; weights
  that leave under ``KV_FLOOR`` of it for the KV cache are a warning.
- CPU mode (``sglang_serve_device: cpu``): the container's memory limit must hold every
  instance's weights plus its processes' own memory (``sglang_serve_cpu_instance_mib``).
- A model folder not in the store yet (a first run, before the download) is a note: fit not
  checked.

Part of the validation pass (action ``sglang_lxc_validate``); unit-tested in
tests/unit/validate/test_validate_fit.py.
"""

from __future__ import annotations

import json
import math
import posixpath
from collections.abc import Mapping, Sequence
from typing import Any

from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_load_progress import (
    GB,
    format_bytes,
    model_dirs,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_common import problem

GIB = 1024**3
MIB = 1024**2
# Below this share of an instance's memory left for the KV cache after the weights, a warning.
# SGLang's KV pool is what mem_fraction_static leaves after the weights; a tenth of a 96 GB GPU
# (~9 GB) holds about 130k tokens of Kimi-K2.5's MLA cache (~70 KB a token, on every GPU of a
# tp group) or 35k of a GQA model like Qwen3-32B (256 KB a token): below that, long contexts or
# a batch of requests no longer fit, and SGLang may stop with "Not enough memory".
KV_FLOOR = 0.10
# tp values suggested: what SGLang's tensor parallelism is used with (attention heads divide).
TP_CHOICES = (1, 2, 4, 8, 16, 32, 64)


def parse_fit(lines: Sequence[str] | None) -> dict[str, Any]:
    """The ``## fit`` section of the node read (node_fit.py's JSON line)."""
    text = "\n".join(lines or []).strip()
    if not text:
        return {"gpus": [], "error": "the node read had no fit section", "folders": {}}
    for line in reversed(text.splitlines()):
        try:
            data = json.loads(line)
        except ValueError:
            continue
        if isinstance(data, dict):
            data.setdefault("gpus", [])
            data.setdefault("folders", {})
            return data
    return {"gpus": [], "error": f"the node's fit read failed: {text.splitlines()[-1][:200]}",
            "folders": {}}


def node_path(path: str, mounts: Any) -> str | None:
    """Where the node holds a container path: through the container's bind mount that covers it
    (the innermost one), None when no mount does (the container's own disk)."""
    best = None
    path = posixpath.normpath(path)
    for mount in mounts if isinstance(mounts, list) else []:
        if not isinstance(mount, Mapping) or not mount.get("host_path") or not mount.get("path"):
            continue
        inside = posixpath.normpath(str(mount["path"]))
        if (path == inside or path.startswith(inside.rstrip("/") + "/")) and (
            best is None or len(inside) > len(best[0])
        ):
            best = (inside, str(mount["host_path"]))
    if best is None:
        return None
    rest = path[len(best[0]):].lstrip("/")
    return posixpath.join(best[1], rest) if rest else best[1]


def node_folders(instances: Sequence[Mapping[str, Any]], mounts: Any) -> list[str]:
    """The node paths of the model and draft folders the instances load (for the node read)."""
    found = []
    for instance in instances:
        for folder in model_dirs(dict(instance)):
            where = node_path(folder, mounts)
            if where and where not in found:
                found.append(where)
    return found


def container_view(spec_gpus: Any, by_minor: Mapping[int, Any]) -> list[Any]:
    """The container's GPU 0, 1, ... as values of the node's GPUs by minor number: the container
    sees the node GPUs its spec lists (all of them for ``all``) in minor-number order."""
    if isinstance(spec_gpus, list):
        try:
            minors = sorted(int(g) for g in spec_gpus)
        except (TypeError, ValueError):
            return []
    else:
        minors = sorted(by_minor)
    return [by_minor.get(m) for m in minors]


def _gpu_memory(spec_gpus: Any, gpus: Sequence[Mapping[str, Any]]) -> list[int | None]:
    """Memory of the container's GPU 0, 1, ... from the node's NVML read."""
    totals = {int(g["minor"]): int(g["total"]) for g in gpus if "minor" in g and "total" in g}
    return container_view(spec_gpus, totals)


def mem_fraction(instance: Mapping[str, Any], gpu_bytes: int) -> tuple[float, str]:
    """The instance's mem_fraction_static and how it is known.

    Unset, SGLang 0.5.12 picks it itself (server_args._handle_gpu_memory_settings): the GPU's
    memory less a reserve for activations and CUDA graphs, at least 512 MiB + 1.5 x 2048 MiB, at
    least 10 GiB on GPUs over 60 GiB, and 4 GiB more with an EAGLE draft. The smallest reserve
    is used, so that the check refuses only what cannot fit.
    """
    argv = list(instance.get("argv") or [])
    if "--mem-fraction-static" in argv:
        index = argv.index("--mem-fraction-static") + 1
        if index < len(argv):
            try:
                return float(argv[index]), "mem_fraction_static"
            except ValueError:
                pass
    reserve = 512 * MIB + 3072 * MIB
    if gpu_bytes > 60 * GIB:
        reserve = max(reserve, 10 * GIB)
    if "--speculative-draft-model-path" in argv:
        reserve += 4 * GIB
    fraction = round((gpu_bytes - reserve) / gpu_bytes, 3)
    return fraction, "SGLang's own mem_fraction_static"


def _gpu_list(gpus: Sequence[int]) -> str:
    gpus = list(gpus)
    if len(gpus) > 2 and gpus == list(range(gpus[0], gpus[0] + len(gpus))):
        return f"[{gpus[0]}..{gpus[-1]}]"
    return "[" + ", ".join(str(g) for g in gpus) + "]"


def _label(folder: str) -> str:
    return folder.rstrip("/").rsplit("/", 1)[-1] or folder


def suggest_tp(weights: int, per_gpu: float, gpu_count: int | None) -> str:
    """The smallest tp whose instance holds the weights with the KV floor left, in words."""
    for tp in TP_CHOICES:
        capacity = tp * per_gpu
        if weights <= capacity * (1 - KV_FLOOR):
            if gpu_count is not None and tp > gpu_count:
                break
            size = format_bytes(capacity)
            if gpu_count is not None and tp == gpu_count:
                return f"one instance with gpus {_gpu_list(range(tp))}, tp {tp}: {size}"
            return (f"instances of {tp} GPUs, e.g. gpus {_gpu_list(range(tp))}, tp {tp}: "
                    f"{size} each")
    need = math.ceil(weights / (per_gpu * (1 - KV_FLOOR)))
    have = "" if gpu_count is None else f" and the container has {gpu_count}"
    return (f"the weights need {need} GPUs of {format_bytes(per_gpu)} each{have}: give the "
            "container more GPUs, or serve a smaller (quantized) model")


def _weights(
    instance: Mapping[str, Any], mounts: Any, folders: Mapping[str, Any], node: str
) -> tuple[int | None, list[str], str]:
    """(bytes, notes, what): the weights of the model and its draft, or None with the reason."""
    total, parts, notes = 0, [], []
    for number, folder in enumerate(model_dirs(dict(instance))):
        kind = "model" if number == 0 else "EAGLE-3 draft"
        where = node_path(folder, mounts)
        if where is None:
            notes.append(f"{_label(folder)}: {folder} is on no mount of the container, so the "
                         "node cannot weigh it: fit not checked")
            continue
        seen = folders.get(where)
        if not isinstance(seen, Mapping):
            notes.append(f"{_label(folder)}: not read on {node}: fit not checked")
        elif not seen.get("present"):
            notes.append(f"{_label(folder)}: model not in the store yet: fit not checked")
        elif not seen.get("files"):
            notes.append(f"{_label(folder)}: no weight files in {where} on {node} yet: fit not "
                         "checked")
        else:
            total += int(seen.get("bytes") or 0)
            parts.append(f"{kind} {_label(folder)} {format_bytes(int(seen.get('bytes') or 0))}")
    return (None if notes else total), notes, " + ".join(parts)


def _tp_var(instance: Mapping[str, Any]) -> str:
    argv, sources = list(instance.get("argv") or []), list(instance.get("argv_from") or [])
    if "--tp" in argv and len(sources) == len(argv):
        return sources[argv.index("--tp")]
    return "sglang_serve_instances"


def fit_problems(
    host: str,
    instances: Sequence[Mapping[str, Any]],
    container: Mapping[str, Any] | None,
    fit: Mapping[str, Any] | None,
    gpu_count: int | None = None,
    device: str = "cuda",
    cpu_instance_mib: int = 3072,
) -> tuple[list[str], list[str], list[str]]:
    """(problems, warnings, notes) of the instances of one serving container.

    ``container``: {"node", "spec"} of the container (its mounts, GPUs and memory); ``fit``: the
    node's parsed fit read; ``gpu_count``: the GPUs the container has (for the suggested tp).
    """
    if not instances:
        return [], [], []
    if container is None:
        return [], [], [f"{host} is not a container of a node in the inventory: fit not checked"]
    node, spec = str(container.get("node")), container.get("spec") or {}
    if fit is None:
        return [], [], [f"{node} was not read: fit not checked"]
    mounts, folders = spec.get("mounts"), fit.get("folders") or {}
    problems: list[str] = []
    warnings: list[str] = []
    notes: list[str] = []
    if str(device) == "cpu":
        return _cpu_fit(host, instances, spec, mounts, folders, node, cpu_instance_mib)
    memory = _gpu_memory(spec.get("gpus", "all"), fit.get("gpus") or [])
    # instances alike (per-GPU mode: the same model on GPUs of one size) share one line
    outcomes: dict[tuple, list[Mapping[str, Any]]] = {}
    for instance in instances:
        name, gpus = instance.get("name"), list(instance.get("gpus") or [])
        weights, missing, what = _weights(instance, mounts, folders, node)
        notes += [n for n in missing if n not in notes]
        if weights is None:
            continue
        sizes = [memory[g] if 0 <= g < len(memory) else None for g in gpus]
        if not sizes or None in sizes:
            why = fit.get("error") or "no NVML answer for these GPUs"
            notes.append(f"{name}: GPU memory unknown on {node} ({why}): fit not checked")
            continue
        smallest = min(s for s in sizes if s is not None)
        fraction, fraction_from = mem_fraction(instance, smallest)
        per_gpu = smallest * fraction
        capacity = per_gpu * len(gpus)
        how = f"{len(gpus)} x {format_bytes(smallest, GB)} x {fraction_from} {fraction:g}"
        if weights > capacity:
            kind = "refused"
        elif capacity - weights < KV_FLOOR * capacity:
            kind = "tight"
        else:
            kind = "fits"
        key = (kind, _tp_var(instance), len(gpus), instance.get("tp"), weights, what, capacity,
               how, suggest_tp(weights, per_gpu, gpu_count))
        outcomes.setdefault(key, []).append(instance)
    for (kind, var, count, tp, weights, what, capacity, how, fix), alike in outcomes.items():
        names = _names([str(i.get("name")) for i in alike])
        each = " each" if len(alike) > 1 else ""
        if kind == "fits":
            notes.append(f"{names}: {format_bytes(weights)} of {format_bytes(capacity)}{each}")
            continue
        if kind == "tight":
            who = f"each of {names}" if len(alike) > 1 else names
            warnings.append(
                f"{host}: {who} holds its weights ({format_bytes(weights)} of "
                f"{format_bytes(capacity)}) but leaves {format_bytes(capacity - weights)} for the "
                f"KV cache, under {KV_FLOOR:.0%}: {fix}"
            )
            continue
        gpus = sorted(g for i in alike for g in i.get("gpus") or [])
        if len(alike) == 1:
            who = f"instance {names} (GPUs {_gpu_list(gpus)}, tp {tp})"
        else:
            who = f"each of the {len(alike)} instances {names} ({count} GPU(s) each, tp {tp})"
        problems.append(problem(
            host, var, gpus,
            f"{who} cannot hold its weights: {format_bytes(weights)} ({what}), more than the "
            f"{format_bytes(capacity)} it may use ({how})", fix,
        ))
    return problems, warnings, notes


def _names(names: list[str]) -> str:
    """gpu0..gpu7 for the per-GPU instances of consecutive GPUs, else the names listed."""
    numbers = [n[3:] for n in names if n.startswith("gpu") and n[3:].isdigit()]
    if len(names) > 2 and len(numbers) == len(names):
        first = int(numbers[0])
        if [int(n) for n in numbers] == list(range(first, first + len(names))):
            return f"{names[0]}..{names[-1]}"
    return ", ".join(names)


def _cpu_fit(host, instances, spec, mounts, folders, node, cpu_instance_mib):
    """CPU mode: every instance loads its own copy of the weights into the container's memory,
    beside its processes (server, scheduler, detokenizer: about 3 GB measured)."""
    notes: list[str] = []
    total = 0
    for instance in instances:
        weights, missing, _what = _weights(instance, mounts, folders, node)
        notes += [n for n in missing if n not in notes]
        if weights is None:
            return [], [], notes
        total += weights
    limit_mib = spec.get("memory")
    if not isinstance(limit_mib, int) or isinstance(limit_mib, bool):
        return [], [], [f"{host}: the container's memory limit is unknown: fit not checked"]
    capacity = limit_mib * MIB
    overhead = len(instances) * int(cpu_instance_mib) * MIB
    need = total + overhead
    count = len(instances)
    what = (f"{count} CPU instance(s) need {format_bytes(need)} ({format_bytes(total)} of "
            f"weights + {count} x {cpu_instance_mib} MiB per instance, "
            f"sglang_serve_cpu_instance_mib), more than the container's {format_bytes(capacity)}")
    if need > capacity:
        want = math.ceil(need / (1 - KV_FLOOR) / MIB)
        return [problem(host, f"proxmox_lxc_containers[{spec.get('name', host)}].memory",
                        limit_mib, what,
                        f"give the container memory: {want} (MiB) or more, or serve fewer "
                        "instances or a smaller model")], [], notes
    if capacity - need < KV_FLOOR * capacity:
        warning = (f"{host}: the {count} CPU instance(s) hold their weights ({format_bytes(need)} "
                   f"of {format_bytes(capacity)}) but leave {format_bytes(capacity - need)} for "
                   f"the KV cache, under {KV_FLOOR:.0%}")
        return [], [warning], notes
    used = f"{count} CPU instance(s): {format_bytes(need)} of {format_bytes(capacity)}"
    return [], [], [*notes, used]
