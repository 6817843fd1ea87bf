"""A scan of every /proc/*/cmdline for the API keys of a host's SGLang instances.

Shared by tests/infra/test_sglang_serve.py and the lab suites (serve, jit). Run as root with the
host's python3: ``python3 -c CMDLINE_SCAN``.
"""

from __future__ import annotations

CONFIG_DIR = "/etc/sglang/instances"

# Run on the host as root with python3: reads every instance's --config file, then every
# /proc/*/cmdline, and prints {"processes": N, "holding": [pids], "keys": K} (never a key: the
# keys travel from the files into this process only, never on a command line).
CMDLINE_SCAN = r"""
import glob, json, os
keys = set()
for path in glob.glob("CONFIG_DIR/*.yaml"):
    for line in open(path, encoding="utf-8"):
        if line.startswith("api-key:"):
            keys.add(json.loads(line.split(":", 1)[1]).encode())
read, holding = 0, []
for path in glob.glob("/proc/[0-9]*/cmdline"):
    try:
        data = open(path, "rb").read()
    except OSError:
        continue
    read += 1
    if any(key in data for key in keys):
        holding.append(int(path.split("/")[2]))
print(json.dumps({"processes": read, "holding": holding, "keys": len(keys)}))
""".replace("CONFIG_DIR", CONFIG_DIR)
