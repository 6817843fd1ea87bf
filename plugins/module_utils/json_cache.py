"""A root-only folder of JSON answers kept under a key: what a module computed once for the same
inputs (SGLang's parser verdicts, cuobjdump's listings). A cache that cannot be read or written
only costs the next computation."""

from __future__ import annotations

import json
import os
from typing import Any


def read(folder: str, key: str) -> Any:
    """What was kept under ``key`` in ``folder``; None when nothing is (or ``folder`` is "")."""
    if not folder:
        return None
    try:
        with open(os.path.join(folder, key + ".json"), encoding="utf-8") as f:
            return json.load(f)
    except (OSError, ValueError):
        return None


def keep(folder: str, key: str, data: Any) -> None:
    """Keep ``data`` under ``key`` (written aside, then renamed); nothing when ``folder`` is ""."""
    if not folder:
        return
    try:
        os.makedirs(folder, mode=0o700, exist_ok=True)
        path = os.path.join(folder, key + ".json")
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            json.dump(data, f)
        os.replace(path + ".tmp", path)
    except OSError:
        pass
