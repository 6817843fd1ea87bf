"""The wheelhouse role's logic run on the hosts (module wheelhouse_files): which wheels a folder
lacks, compared by name and size, its free space and whether it is read-only (the node cache's
mount). The controller-side logic (fingerprint, command lines) is in
plugins/plugin_utils/wheelhouse.py.
Unit-tested in tests/unit/faults/test_wheelhouse_logic.py."""

from __future__ import annotations

import os


def missing(want: list[dict], have: dict[str, int]) -> list[dict]:
    """Wheels of want ([{name, size}]) that have ({name: size}) lacks or holds at another size."""
    return [w for w in want if have.get(w["name"]) != int(w["size"])]


def folder_wheels(path: str) -> dict[str, int]:
    """{name: size} of the .whl files in path ({} when it does not exist)."""
    try:
        entries = list(os.scandir(path))
    except FileNotFoundError:
        return {}
    return {e.name: e.stat().st_size for e in entries if e.name.endswith(".whl") and e.is_file()}


def folder_state(path: str, want: list[dict]) -> dict:
    """What a wheel folder lacks, the free space where it lives, and whether it is read-only."""
    gone = missing(want, folder_wheels(path))
    probe = path
    while not os.path.exists(probe):
        probe = os.path.dirname(probe) or "/"
    st = os.statvfs(probe)
    mount = os.path.realpath(probe)
    while not os.path.ismount(mount):
        mount = os.path.dirname(mount)
    return {
        "exists": os.path.isdir(path),
        "missing": [w["name"] for w in gone],
        "missing_bytes": sum(int(w["size"]) for w in gone),
        "free_bytes": st.f_bavail * st.f_frsize,
        "mount": mount,
        "read_only": bool(st.f_flag & os.ST_RDONLY),
    }
