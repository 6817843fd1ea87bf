"""Serving options with no SM120 path, refused before anything changes.

The table is roles/sglang_serve/files/sm120_refusals.yml: each row is an option (an attention
backend, a MoE runner backend, an FP8 GEMM backend or an environment switch), why the locked
stack has no SM120 (compute capability 12.x) path for it, what SGLang picks instead, and the
citation (a line of the locked SGLang or FlashInfer wheel, or a cubin listing of the lock's
kernel wheels; tests/unit/validate/test_sm120_citations.py checks each against the wheels).

The GPUs' compute capability comes from the node read (playbooks/files/node_fit.py, NVML or
nvidia-smi, once per run). An instance whose GPUs report 12.x and that sets a refused option gets
one problem line naming the instance, the variable that set it, why (with the citation) and
what SGLang picks instead. Instances alike (per-GPU instances of one setting) share one line.

Part of the validation pass (action ``sglang_lxc_validate``); unit-tested in
tests/unit/validate/test_validate_sm120.py.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_common import problem
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_declared import (
    ROLES_DIR,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_fit import container_view

TABLE = ROLES_DIR / "sglang_serve" / "files" / "sm120_refusals.yml"
# The flags that set each kind, and the attention phases each flag sets.
FLAGS: dict[str, dict[str, tuple[str, ...]]] = {
    "attention_backend": {
        "--attention-backend": ("prefill", "decode"),
        "--prefill-attention-backend": ("prefill",),
        "--decode-attention-backend": ("decode",),
    },
    "moe_runner_backend": {"--moe-runner-backend": ()},
    "fp8_gemm_backend": {"--fp8-gemm-backend": ()},
}
SM120_MAJOR = 12


@functools.cache
def _load(path: str) -> dict[str, Any]:
    return yaml.safe_load(Path(path).read_text(encoding="utf-8"))


def load_table(path: Path | str = TABLE) -> dict[str, Any]:
    """The refusal table (read once per process)."""
    return _load(str(path))


def _versions(table: Mapping[str, Any]) -> dict[str, str]:
    """Wheel name -> version, from the lock the table names."""
    return _lock_versions(str(table.get("lock", "")))


@functools.cache
def _lock_versions(name: str) -> dict[str, str]:
    lock = ROLES_DIR / "sglang" / "files" / "locks" / name
    versions: dict[str, str] = {}
    try:
        text = lock.read_text(encoding="utf-8")
    except OSError:
        return versions
    for line in text.splitlines():
        head = line.split("#", 1)[0].strip()
        if "==" in head:
            name, version = head.split("==", 1)
            versions[name.strip().lower()] = version.strip()
    return versions


def cite_text(cite: Mapping[str, Any], table: Mapping[str, Any]) -> str:
    """One citation in words: wheel and version, file:line and the line's text, or the listing."""
    versions = _versions(table)
    if "listing" in cite:
        listing = (table.get("listings") or {}).get(cite["listing"]) or {}
        where = cite.get("library") or cite.get("directory")
        archs = " ".join(cite.get("archs") or [])
        return (f"{listing.get('wheel', cite['listing'])} {listing.get('version', '?')} "
                f"{where}: {archs} only ({listing.get('tool', 'recorded')})")
    wheel = str(cite.get("source"))
    head = f"{wheel} {versions.get(wheel, '?')} "
    if "listing_of" in cite:
        prefixes = ", ".join(f"{p}*" for p in cite.get("prefixes") or [])
        return f"{head}{cite['listing_of']}: {prefixes} only"
    if "contains" in cite:
        return f'{head}{cite["file"]}: "{cite["contains"]}"'
    return f"{head}{cite['file']}:{cite['line']} `{cite['text']}`"


def flag_value(argv: Sequence[str], argv_from: Sequence[str], flag: str
               ) -> tuple[str, str, list[str]] | None:
    """(value, the variable that set it, the arguments as written) of the last ``flag`` in argv
    (``--flag value`` or ``--flag=value``, as argparse reads them), or None."""
    found = None
    for index, arg in enumerate(argv):
        source = argv_from[index] if index < len(argv_from) else "sglang_serve_extra_args"
        if arg == flag and index + 1 < len(argv):
            found = (argv[index + 1], source, [arg, argv[index + 1]])
        elif arg.startswith(flag + "="):
            found = (arg.split("=", 1)[1], source, [arg])
    return found


def compute_caps(spec_gpus: Any, node_gpus: Sequence[Mapping[str, Any]],
                 instance_gpus: Sequence[int]) -> list[tuple[int, int] | None]:
    """The compute capability of each of the instance's GPUs: the container sees the node GPUs
    its spec lists (all of them for ``all``) in minor-number order (as validate_fit reads them)."""
    by_minor = {}
    for gpu in node_gpus:
        cap = gpu.get("compute_capability")
        if "minor" in gpu and isinstance(cap, (list, tuple)) and len(cap) == 2:
            by_minor[int(gpu["minor"])] = (int(cap[0]), int(cap[1]))
        elif "minor" in gpu:
            by_minor[int(gpu["minor"])] = None
    seen = container_view(spec_gpus, by_minor)
    return [seen[g] if 0 <= g < len(seen) else None for g in instance_gpus]


def env_source(values: Mapping[str, Any], instance: Mapping[str, Any], name: str) -> str:
    """The variable an instance's environment switch comes from (its own env wins)."""
    declared = values.get("sglang_serve_instances") or []
    for index, raw in enumerate(declared if isinstance(declared, list) else []):
        if isinstance(raw, Mapping) and raw.get("name") == instance.get("name") and name in (
            raw.get("env") or {}
        ):
            return f"sglang_serve_instances[{index}] ({raw.get('name')}).env.{name}"
    return f"sglang_serve_env.{name}"


def instance_refusals(instance: Mapping[str, Any], values: Mapping[str, Any],
                      table: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The table's rows an instance's own settings hit, whatever its GPU: each with the variable
    that set it, the value as written and the option in words."""
    argv = list(instance.get("argv") or [])
    argv_from = list(instance.get("argv_from") or [])
    env = instance.get("env") or {}
    hits: list[dict[str, Any]] = []
    phase_of: dict[str, tuple[str, str, str, list[str]]] = {}
    for flag, phases in FLAGS["attention_backend"].items():
        got = flag_value(argv, argv_from, flag)
        if got is not None:
            for phase in phases:
                # the phase-specific flags win over --attention-backend, as in SGLang
                if phase not in phase_of or flag != "--attention-backend":
                    phase_of[phase] = (got[0], got[1], flag, got[2])
    for row in table.get("refusals") or []:
        kind = row.get("kind")
        if kind == "attention_backend":
            by_flag: dict[tuple[str, str], list[str]] = {}
            shown: dict[tuple[str, str], list[str]] = {}
            for phase in row.get("phases") or []:
                got = phase_of.get(phase)
                if got and got[0] == row.get("value"):
                    by_flag.setdefault((got[2], got[1]), []).append(phase)
                    shown[(got[2], got[1])] = got[3]
            for (flag, var), phases in by_flag.items():
                hits.append({"row": row, "var": var, "option": f"{flag} {row['value']}",
                             "phases": phases, "written": shown[(flag, var)]})
        elif kind in FLAGS:
            for flag in FLAGS[kind]:
                got = flag_value(argv, argv_from, flag)
                if got and got[0] == row.get("value"):
                    hits.append({"row": row, "var": got[1], "option": f"{flag} {got[0]}",
                                 "phases": [], "written": got[2]})
        elif kind == "env":
            name = str(row.get("name"))
            value = env.get(name)
            if value is not None and str(value).strip().lower() in [
                str(v).lower() for v in row.get("values") or []
            ]:
                hits.append({"row": row, "var": env_source(values, instance, name),
                             "option": f"{name}={value}", "phases": [], "written": str(value)})
    return hits


def _value_shown(hit: Mapping[str, Any]) -> Any:
    """The value as the problem line shows it: the backend for the role's own variable, the
    arguments for extra args, the switch's value for an environment variable."""
    written = hit["written"]
    if isinstance(written, list) and str(hit["var"]).endswith("attention_backend"):
        return written[-1]  # sglang_serve_attention_backend or an instance's attention_backend
    return written


def _names(names: list[str]) -> str:
    from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_fit import (
        _names as fit_names,
    )

    return fit_names(names)


def sm120_problems(
    host: str,
    instances: Sequence[Mapping[str, Any]],
    values: Mapping[str, Any],
    container: Mapping[str, Any] | None,
    fit: Mapping[str, Any] | None,
    table: Mapping[str, Any] | None = None,
) -> tuple[list[str], list[str]]:
    """(problems, notes): the refused options of the instances of one serving container on an
    SM120 node. A note where an instance sets a refused option but its GPUs' compute capability
    is unknown (no NVML answer): not checked."""
    if not instances or container is None or fit is None:
        return [], []
    table = load_table() if table is None else table
    node = str(container.get("node"))
    spec = container.get("spec") or {}
    node_gpus = fit.get("gpus") or []
    grouped: dict[tuple, list[str]] = {}
    notes: list[str] = []
    for instance in instances:
        if str(instance.get("device", "cuda")) == "cpu":
            continue
        hits = instance_refusals(instance, values, table)
        if not hits:
            continue
        caps = compute_caps(spec.get("gpus", "all"), node_gpus, list(instance.get("gpus") or []))
        known = [c for c in caps if c is not None]
        if not caps or len(known) != len(caps):
            why = fit.get("error") or "no compute capability in the node's GPU read"
            notes.append(f"{instance.get('name')}: GPU compute capability unknown on {node} "
                         f"({why}): SM120 refusals not checked")
            continue
        sm120 = sorted({c for c in known if c[0] == SM120_MAJOR})
        if not sm120:
            continue
        for hit in hits:
            key = (hit["var"], repr(_value_shown(hit)), hit["row"]["id"], hit["option"],
                   tuple(hit["phases"]), tuple(sm120))
            grouped.setdefault(key, []).append(str(instance.get("name")))
    problems = []
    for (var, _shown, row_id, option, phases, caps), names in grouped.items():
        row = next(r for r in table.get("refusals") or [] if r.get("id") == row_id)
        hit_value = next(h for i in instances if str(i.get("name")) == names[0]
                         for h in instance_refusals(i, values, table)
                         if h["var"] == var and h["row"]["id"] == row_id)
        who = f"instance {names[0]}" if len(names) == 1 else f"instances {_names(names)}"
        phase = f" as the {' and '.join(phases)} backend" if phases else ""
        cap = ", ".join(f"{a}.{b}" for a, b in caps)
        cites = "; ".join(cite_text(c, table) for c in row.get("cite") or [])
        what = (f"{who} on {node} (GPUs of compute capability {cap}, SM120) would run "
                f"{option}{phase}, which has no SM120 path in the locked stack: "
                f"{str(row['why']).strip()} [{cites}]")
        fix = (f"{str(row.get('fix') or 'remove it').strip()}; SGLang then picks "
               f"{str(row['instead']).strip()}")
        problems.append(problem(host, var, _value_shown(hit_value), what, fix))
    return problems, notes
