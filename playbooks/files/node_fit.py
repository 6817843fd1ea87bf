"""What the fit check reads on a Proxmox node, printed as one JSON line (node_state.sh runs it).

Called as: python3 -c "$(cat node_fit.py)" READER_TEXT FOLDER...

- GPU memory, once, from NVML: pynvml (nvidia-ml-py) where the node's Python has it, else
  ``nvidia-smi``, NVML's own command-line client, which the driver installs.
- Each FOLDER (a model or EAGLE-3 draft folder, as the node sees the model store): whether it is
  there, and the files and bytes SGLang would load. READER_TEXT is the text of the collection's
  plugins/module_utils/sglang_load_progress.py, the reader load progress weighs the same files
  with: the node has no copy of the collection, so the play passes the file itself.

Changes nothing. Unit-tested in tests/unit/validate/test_validate_fit.py.
"""

from __future__ import annotations

import json
import subprocess
import sys
import types

MIB = 1024 * 1024


def load_reader(text):
    """The reader module from its text."""
    module = types.ModuleType("sglang_load_progress")
    exec(compile(text, "sglang_load_progress.py", "exec"), module.__dict__)
    return module


def nvml_gpus(nvml):
    """[{index, minor, total}] from a pynvml-shaped module; raises its NVMLError."""
    nvml.nvmlInit()
    try:
        gpus = []
        for index in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            try:
                minor = int(nvml.nvmlDeviceGetMinorNumber(handle))
            except nvml.NVMLError:
                minor = index
            total = int(nvml.nvmlDeviceGetMemoryInfo(handle).total)
            gpus.append({"index": index, "minor": minor, "total": total})
        return gpus
    finally:
        nvml.nvmlShutdown()


def smi_gpus(text):
    """[{index, minor, total}] from ``nvidia-smi --query-gpu=index,memory.total
    --format=csv,noheader,nounits`` (MiB; NVML's index order, which is also the minor order
    of the /dev/nvidia<N> nodes on a usual node)."""
    gpus = []
    for line in text.splitlines():
        parts = [p.strip() for p in line.split(",")]
        if len(parts) == 2 and parts[0].isdigit() and parts[1].isdigit():
            index = int(parts[0])
            gpus.append({"index": index, "minor": index, "total": int(parts[1]) * MIB})
    return gpus


def read_gpus():
    """{"gpus": [...], "source": ..., "error": text or None}."""
    try:
        import pynvml
    except ImportError as exc:
        why = f"pynvml not importable ({exc})"
    else:
        try:
            return {"gpus": nvml_gpus(pynvml), "source": "pynvml", "error": None}
        except pynvml.NVMLError as exc:
            why = f"NVML: {type(exc).__name__}: {exc}"
    try:
        proc = subprocess.run(
            ["nvidia-smi", "--query-gpu=index,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True, text=True, timeout=30, check=False,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        return {"gpus": [], "source": None, "error": f"{why}; nvidia-smi: {exc}"}
    if proc.returncode != 0:
        tail = (proc.stderr or proc.stdout).strip().splitlines()[-1:] or [""]
        return {"gpus": [], "source": None,
                "error": f"{why}; nvidia-smi exited {proc.returncode}: {tail[0][:200]}"}
    return {"gpus": smi_gpus(proc.stdout), "source": "nvidia-smi", "error": None}


def main(argv):
    reader = load_reader(argv[0])
    report = read_gpus()
    report["folders"] = {folder: reader.folder_weights(folder) for folder in argv[1:]}
    print(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1:])
