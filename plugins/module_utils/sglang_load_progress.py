"""How far an SGLang instance's weight load is: the model's weight files, the bytes read, SGLang's
own shard lines, rate and ETA (module sglang_readiness; unit-tested in
tests/unit/serve/test_serve_readiness.py).

The validate play weighs the same files before anything changes (the fit of a model in its
instance, plugin_utils/validate_fit.py): playbooks/files/node_fit.py runs this file's text on
the Proxmox node, which holds the model store, and calls ``folder_weights``. So this file
imports the standard library only."""

from __future__ import annotations

import glob
import json
import os
import re
import subprocess
from typing import Any

# SGLang 0.5.12's loader (sglang/srt/model_loader/weight_utils.py) prints tqdm bars such as
# "Loading safetensors checkpoint shards:  43% Completed | 35/82 [...]" or "Multi-thread loading
# shards: ..."; tqdm redraws with carriage returns, so one journal line may hold many updates.
SHARD_LINE = re.compile(r"(?:checkpoint shards|loading shards)[^|\r\n]*\|\s*(\d+)/(\d+)")


def shard_progress(lines: list[str]) -> list[int] | None:
    """[done, total] of the last shard-progress update in ``lines`` (None when there is none)."""
    for line in reversed(lines):
        found = SHARD_LINE.findall(line)
        if found:
            done, total = found[-1]
            return [int(done), int(total)]
    return None


WEIGHT_PATTERNS = ("*.safetensors", "*.bin", "*.pt")


def weight_files(model_path: str) -> list[str]:
    """The files SGLang loads weights from: those the safetensors index names (SGLang drops the
    others), else every ``*.safetensors`` of the folder, else ``*.bin`` / ``*.pt``."""
    if not model_path:
        return []
    index = os.path.join(model_path, "model.safetensors.index.json")
    try:
        with open(index, encoding="utf-8") as handle:
            names = sorted(set(json.load(handle).get("weight_map", {}).values()))
        return [os.path.join(model_path, n) for n in names]
    except (OSError, ValueError, AttributeError):
        pass
    for pattern in WEIGHT_PATTERNS:
        found = sorted(glob.glob(os.path.join(glob.escape(model_path), pattern)))
        if found:
            return found
    return []


def model_dirs(instance: dict[str, Any]) -> list[str]:
    """The folders an instance loads weights from: its model's, and its EAGLE-3 draft model's."""
    dirs = [str(instance.get("model_path") or "")]
    argv = list(instance.get("argv") or [])
    if "--speculative-draft-model-path" in argv:
        index = argv.index("--speculative-draft-model-path") + 1
        if index < len(argv):
            dirs.append(argv[index])
    return [d for d in dirs if d]


def instance_weight_files(instance: dict[str, Any]) -> list[str]:
    """The model's weight files plus the EAGLE-3 draft model's."""
    files: list[str] = []
    for folder in model_dirs(instance):
        files += weight_files(folder)
    return files


def folder_weights(model_path: str) -> dict[str, Any]:
    """What the fit check needs of one model folder: whether it is there, and the count and
    bytes of the files SGLang would load from it (those of ``weight_files``)."""
    files = weight_files(model_path)
    return {
        "present": os.path.isdir(model_path),
        "files": len(files),
        "bytes": total_size(files),
    }


def total_size(files: list[str]) -> int:
    total = 0
    for path in files:
        try:
            total += os.stat(path).st_size
        except OSError:
            continue
    return total


def resident_bytes(files: list[str]) -> int | None:
    """Bytes of ``files`` in the page cache (util-linux fincore), None when it cannot tell."""
    if not files:
        return None
    try:
        out = subprocess.run(
            ["fincore", "--bytes", "--noheadings", "--raw", "--output", "RES", *files],
            capture_output=True,
            text=True,
            check=False,
            timeout=20,
        ).stdout
        return sum(int(v) for v in out.split() if v.isdigit())
    except (OSError, subprocess.SubprocessError):
        return None


GB = 1e9


def format_bytes(count: float, like: float | None = None) -> str:
    """547 GB, 1.9 GB, 38 MB, 420 kB (decimal units, as model sizes are given); in the unit and
    precision ``like`` would get, when given (235/547 GB, 0.9/2.1 GB)."""
    scale = count if like is None else like
    if scale >= 100 * GB:
        return f"{count / GB:.0f} GB"
    if scale >= GB:
        return f"{count / GB:.1f} GB"
    if scale >= 1e6:
        return f"{count / 1e6:.0f} MB"
    return f"{count / 1e3:.0f} kB"  # the lab's tiny model: not "0/0 MB"


def format_eta(seconds: float) -> str:
    seconds = round(max(0, seconds))
    if seconds >= 3600:
        return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"
    if seconds >= 60:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds}s"


def load_progress(
    obs: dict[str, Any], previous: dict[str, Any], now: float, window: float
) -> tuple[dict[str, Any], list[list[float]]]:
    """Load progress of one instance and the read samples to keep (``[[time, bytes], ...]``).

    ``done`` is what the unit's processes read from disk plus what was in the page cache when the
    wait began (``obs["cached_at_start"]``, read once), capped at the weights' total; the rate
    is taken over the samples of the last ``window`` seconds. Flat reads while the weights sit
    in the page cache (``obs["resident_bytes"]``) say "cached" rather than a false 0%.
    """
    total = int(obs.get("total_bytes") or 0)
    read = obs.get("read_bytes")
    last = previous.get("progress", {})
    if read is not None and last.get("done_bytes") is not None:
        # a load never goes back: the sum over the unit's processes falls when one of them is
        # gone (a look between a kill and systemd's report of it read 0% after 81%, CI)
        read = max(int(read), last["done_bytes"] - int(last.get("cached_bytes") or 0))
    samples = [s for s in previous.get("samples", []) if now - s[0] <= window]
    if read is not None:
        # when the counters were read, not when the look began: under load, a look's systemctl
        # and journal reads took seconds, and a rate over those stamps read 24% fast (CI)
        samples.append([float(obs.get("read_at") or now), int(read)])
    shards = obs.get("shards") or previous.get("progress", {}).get("shards")
    # the weights already in the page cache when the wait began: they load without a disk read
    cached_bytes = previous.get("progress", {}).get("cached_bytes")
    if cached_bytes is None:
        cached_bytes = min(int(obs.get("cached_at_start") or 0), total)
    progress: dict[str, Any] = {
        "total_bytes": total,
        "cached_bytes": cached_bytes,
        "done_bytes": None,
        "percent": None,
        "rate_bps": None,
        "eta_s": None,
        "shards_done": shards[0] if shards else None,
        "shards_total": shards[1] if shards else None,
        "shards": shards,
        "cached": False,
    }
    if read is not None and total:
        done = min(int(read) + cached_bytes, total)
        progress["done_bytes"] = done
        progress["percent"] = int(done * 100 // total)
        # from the last sample before reads began to move (a flat start, e.g. the imports
        # before the weights, would understate the rate for a whole window)
        moving = samples
        while len(moving) > 2 and moving[1][1] == moving[0][1]:
            moving = moving[1:]
        if len(moving) >= 2 and moving[-1][0] - moving[0][0] >= 1:
            span = moving[-1][0] - moving[0][0]
            rate = max(0.0, (moving[-1][1] - moving[0][1]) / span)
            progress["rate_bps"] = round(rate)
            # no ETA before 2% of the weights were read: until then the reads are the
            # interpreter's libraries (SGLang's imports), and an ETA of hours would mislead
            if rate > 0 and done < total and int(read) >= 0.02 * (total - cached_bytes):
                progress["eta_s"] = round((total - done) / rate)
            resident = obs.get("resident_bytes")
            flat = rate * span < 0.01 * total
            if flat and resident is not None and resident >= 0.9 * (total - done):
                progress["cached"] = True
    if read is None and last.get("done_bytes") is not None:
        # no process of the unit to count (killed, before systemd restarts or reports it): the
        # load got as far as last read, not back to SGLang's shard count, which lags the reads
        progress["done_bytes"], progress["percent"] = last["done_bytes"], last["percent"]
    if shards and (progress["percent"] is None or progress["cached"]):
        progress["percent"] = int(shards[0] * 100 // max(1, shards[1]))
    progress["text"] = progress_text(progress)
    return progress, samples


def progress_text(progress: dict[str, Any]) -> str:
    """``43% (235/547 GB, 1.9 GB/s, ETA 2m40s)``, ``cached, shards 82/82`` or ``''``."""
    shards = progress.get("shards")
    shard_text = f"shards {shards[0]}/{shards[1]}" if shards else ""
    if progress.get("cached"):
        return ", ".join(p for p in ("cached", shard_text or "weights in page cache") if p)
    if progress.get("done_bytes") is None:  # no weight files here to weigh: SGLang's shards
        return f"{progress['percent']}% ({shard_text})" if shard_text else ""
    total = progress["total_bytes"]
    parts = [f"{format_bytes(progress['done_bytes'], total).split()[0]}/{format_bytes(total)}"]
    if progress.get("rate_bps") is not None:
        parts.append(f"{format_bytes(progress['rate_bps'])}/s")
    if progress.get("eta_s") is not None:
        parts.append(f"ETA {format_eta(progress['eta_s'])}")
    if progress.get("cached_bytes"):
        parts.append(f"{format_bytes(progress['cached_bytes'], total)} cached")
    if shard_text:
        parts.append(shard_text)
    return f"{progress['percent']}% ({', '.join(parts)})"
