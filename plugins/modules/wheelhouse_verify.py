#!/usr/bin/python
"""Check a wheel set's files on the controller against the lock's sha256 and remove bad ones."""

from __future__ import annotations

DOCUMENTATION = r"""
module: wheelhouse_verify
short_description: Check the controller's wheels against their sha256 and remove the bad ones
description:
  - Computes the sha256 of each listed wheel in I(path) and compares it with the hashes the set
    allows (the lock's). A file whose digest is not among them (truncated, corrupt, replaced) is
    removed, so the next pip download fetches it again; the result names its controller path.
  - Digests are cached in I(cache) by size, modification time, change time and inode, so an
    unchanged wheelhouse is not read again on every run. Any change through the filesystem moves
    the change time (no one can set it back) or the inode (a file renamed over it), so a file
    rewritten in place at its old size with its old modification time put back is read again.
    What the key cannot see is damage beneath the filesystem (a bad disk), which the targets'
    C(--require-hashes) install still refuses.
options:
  path:
    description: Controller folder of the set.
    type: path
    required: true
  files:
    description: Wheel file names of the set (missing ones are reported, not an error).
    type: list
    elements: str
    required: true
  hashes:
    description: sha256 hex digests the set allows.
    type: list
    elements: str
    required: true
  cache:
    description: JSON file that caches digests by name, size, mtime, ctime and inode.
    type: path
    required: true
  remove:
    description: Remove the files that fail the check.
    type: bool
    default: true
author:
  - sglang-lxc contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Check the controller's copies of the stack's wheels against the lock
  sglang_lxc.serving.wheelhouse_verify:
    path: ~/.cache/sglang-lxc/wheelhouse/sglang-0.5.12
    files: [torch-2.11.0-cp311-cp311-manylinux_2_28_x86_64.whl]
    hashes: [e18a57b8b352eb7c8feb317b9f6f533c8f0ad9673fd6cf34bbe3cf1a9f6a8984]
    cache: ~/.cache/sglang-lxc/wheelhouse/sglang-0.5.12/.sets/verified.json
  delegate_to: localhost
  run_once: true
"""

RETURN = r"""
bad:
  description: Files that failed, each with path, sha256 (found) and size.
  type: list
  returned: always
missing:
  description: Listed files absent from the folder.
  type: list
  returned: always
checked:
  description: Number of files whose digest matched.
  type: int
  returned: always
hashed_bytes:
  description: Bytes read to compute digests this run (0 when all came from the cache).
  type: int
  returned: always
"""

import hashlib
import json
import os
import tempfile

from ansible.module_utils.basic import AnsibleModule


def sha256_of(path: str) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def load_cache(path: str) -> dict:
    try:
        with open(path, encoding="utf-8") as fh:
            data = json.load(fh)
        return data if isinstance(data, dict) else {}
    except (OSError, ValueError):
        return {}


def save_cache(path: str, data: dict) -> None:
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=folder, prefix=".verified-")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        json.dump(data, fh, indent=1, sort_keys=True)
    os.replace(tmp, path)


def stat_key(st: os.stat_result) -> list[int]:
    """What the cached digest of a file is keyed on: a write, a utime (even one that puts the
    old mtime back), a chmod or a rename over it changes st_ctime or st_ino."""
    return [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]


def verify(folder: str, files: list[str], allowed: set[str], cache: dict, remove: bool,
           check_mode: bool) -> dict:
    bad, missing, checked, hashed = [], [], 0, 0
    for name in files:
        path = os.path.join(folder, name)
        try:
            st = os.stat(path)
        except FileNotFoundError:
            missing.append(name)
            cache.pop(name, None)
            continue
        key = stat_key(st)
        entry = cache.get(name)
        if isinstance(entry, dict) and entry.get("stat") == key:
            digest = entry.get("sha256", "")
        else:
            digest = sha256_of(path)
            hashed += st.st_size
            cache[name] = {"stat": key, "sha256": digest}
        if digest in allowed:
            checked += 1
            continue
        bad.append({"path": path, "sha256": digest, "size": st.st_size})
        cache.pop(name, None)
        if remove and not check_mode:
            os.unlink(path)
    return {"bad": bad, "missing": missing, "checked": checked, "hashed_bytes": hashed}


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "path": {"type": "path", "required": True},
            "files": {"type": "list", "elements": "str", "required": True},
            "hashes": {"type": "list", "elements": "str", "required": True, "no_log": False},
            "cache": {"type": "path", "required": True},
            "remove": {"type": "bool", "default": True},
        },
        supports_check_mode=True,
    )
    p = module.params
    allowed = {h.lower().removeprefix("sha256:") for h in p["hashes"]}
    cache = load_cache(p["cache"])
    result = verify(p["path"], p["files"], allowed, cache, p["remove"], module.check_mode)
    if not module.check_mode:
        try:
            save_cache(p["cache"], cache)
        except OSError as exc:
            module.warn(f"could not write the digest cache {p['cache']}: {exc}")
    for item in result["bad"]:
        module.warn(
            f"controller wheel {item['path']} ({item['size']} bytes, "
            f"sha256 {item['sha256'][:16]}...) does not match the lock's sha256"
            + ("; removed, it is fetched again" if p["remove"] and not module.check_mode else "")
        )
    module.exit_json(changed=bool(result["bad"]) and p["remove"], **result)


if __name__ == "__main__":
    main()
