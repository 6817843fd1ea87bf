#!/usr/bin/env python3
"""Count the suite's ansible-playbook runs per test file, with their wall time.

    SGLANG_LXC_PLAYBOOK_LOG=/tmp/runs.jsonl .ci/run      # or any pytest run of the lab tests
    python3 benchmarks/playbook_runs.py /tmp/runs.jsonl

tests/lablib.py writes one JSON line per run (the test, or the fixture's test, that ran it; the
playbooks; the seconds). The suite's time follows the number of playbook runs
(docs/performance.md, "Where CI's time goes"): this is the count to cut.
"""

from __future__ import annotations

import json
import sys
from collections import defaultdict


def main(path: str) -> int:
    runs: dict[str, list[float]] = defaultdict(list)
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            entry = json.loads(line)
            runs[entry["test"].split("::")[0] or "(outside a test)"].append(entry["seconds"])
    print(f"{'test file':60} {'runs':>5} {'seconds':>8}")
    for name, seconds in sorted(runs.items(), key=lambda kv: -len(kv[1])):
        print(f"{name:60} {len(seconds):5d} {sum(seconds):8.0f}")
    total = [s for seconds in runs.values() for s in seconds]
    print(f"{'all':60} {len(total):5d} {sum(total):8.0f}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:]))
