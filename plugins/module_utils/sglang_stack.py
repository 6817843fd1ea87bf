"""The serving stack's logic, shared by the probe (sglang_stack_probe) and the installer
(sglang_stack_release): drift of a venv against the lock, the installer command lines and the
requirements file with sha256, and what a release takes on disk (uv itself:
module_utils/uv_tool.py).

Pure functions where possible, unit-tested in tests/unit/sglang/test_stack_logic.py.
"""

from __future__ import annotations

import glob
import hashlib
import json
import os
import re
import zipfile

# Completion marker of a release venv: written last, after the venv passed its check.
MARKER = ".sglang-lxc-release.json"

# Distributions a venv may hold beyond the lock without counting as drift: what `python -m venv`
# seeds (the kernel build path keeps pip in the venv).
VENV_SEEDS = ("pip", "setuptools", "wheel")

# Run by the venv's own python: every installed distribution's exact version, as JSON.
VERSIONS_CODE = r"""
import importlib.metadata as md, json, sys
out = {}
for d in md.distributions():
    name = d.metadata["Name"]
    if name:
        out.setdefault(name, d.version)
print(json.dumps({"python": "%d.%d" % sys.version_info[:2], "versions": out}))
"""


def norm(name: str) -> str:
    """PEP 503 normalised distribution name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def split_pin(pin: str) -> tuple[str, str]:
    name, sep, version = pin.partition("==")
    if not sep or not name.strip() or not version.strip():
        raise ValueError(f"not an exact pin (name==version): {pin!r}")
    return name.strip(), version.strip()


def drift(pins: list[str], installed: dict[str, str], ignore_extra: list[str] = ()) -> dict:
    """Compare installed {name: version} with name==version pins.

    Returns missing (pins not installed), wrong ({pin, found}), extra (installed names the lock
    lacks, less ignore_extra and the venv's seeds).
    """
    have = {norm(k): (k, v) for k, v in installed.items()}
    want = {}
    for pin in pins:
        name, version = split_pin(pin)
        want[norm(name)] = (pin, version)
    missing, wrong = [], []
    for key, (pin, version) in sorted(want.items()):
        if key not in have:
            missing.append(pin)
        elif have[key][1].lower() != version.lower():
            wrong.append({"pin": pin, "found": have[key][1]})
    ignored = {norm(n) for n in list(ignore_extra) + list(VENV_SEEDS)}
    extra = sorted(f"{have[k][0]}=={have[k][1]}" for k in have
                   if k not in want and k not in ignored)
    return {"missing": missing, "wrong": wrong, "extra": extra}


def describe(d: dict, limit: int = 8) -> str:
    """One line for a drift dict: what would change."""
    parts = []
    if d.get("missing"):
        parts.append(f"{len(d['missing'])} missing ({', '.join(d['missing'][:limit])}"
                     + (", ..." if len(d["missing"]) > limit else "") + ")")
    if d.get("wrong"):
        shown = [f"{w['pin']} (found {w['found']})" for w in d["wrong"][:limit]]
        parts.append(f"{len(d['wrong'])} at another version ({', '.join(shown)}"
                     + (", ..." if len(d["wrong"]) > limit else "") + ")")
    if d.get("extra"):
        parts.append(f"{len(d['extra'])} not in the lock ({', '.join(d['extra'][:limit])}"
                     + (", ..." if len(d["extra"]) > limit else "") + ")")
    return "; ".join(parts) or "no version drift"


def requirements_text(pins: list[str], hashes: dict[str, str]) -> str:
    """A requirements file with each pin's sha256 (for --require-hashes)."""
    lines = []
    for pin in pins:
        split_pin(pin)
        digest = hashes.get(pin)
        if not digest or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError(f"no sha256 for {pin} in the lock")
        lines.append(f"{pin} --hash=sha256:{digest}")
    return "\n".join(lines) + "\n"


def uv_venv_argv(uv: str, python: str, venv: str) -> list[str]:
    """uv creates a venv without pip, from the given interpreter, without any download."""
    return [uv, "venv", "--no-config", "--offline", "--no-python-downloads", "--python", python,
            venv]


def uv_install_argv(uv: str, venv: str, wheel_dir: str, requirements: str,
                    require_hashes: bool = True, extra: list[str] = (),
                    compile_bytecode: bool = True) -> list[str]:
    """uv pip install from a wheel folder only: no index, no network, hashes checked.

    compile_bytecode: uv writes the bytecode of every module at install, as pip does by default
    (uv does not): the services' user cannot write __pycache__ in a root-owned venv, so without it
    every process of every start compiles its imports again."""
    argv = [uv, "pip", "install", "--no-config", "--offline", "--no-index",
            "--find-links", wheel_dir, "--python", os.path.join(venv, "bin", "python"),
            "--requirement", requirements]
    argv += ["--compile-bytecode"] if compile_bytecode else []
    return argv + (["--require-hashes"] if require_hashes else []) + list(extra)


def pip_install_argv(venv: str, wheel_dir: str, requirements: str, require_hashes: bool = True,
                     extra: list[str] = (), compile_bytecode: bool = True) -> list[str]:
    argv = [os.path.join(venv, "bin", "python"), "-m", "pip", "install", "--no-index",
            "--find-links", wheel_dir, "--disable-pip-version-check", "--no-input",
            "--progress-bar", "off", "--no-cache-dir", "--requirement", requirements]
    argv += [] if compile_bytecode else ["--no-compile"]  # pip compiles by default
    return argv + (["--require-hashes"] if require_hashes else []) + list(extra)


def dists_key(venv: str) -> str | None:
    """The venv's installed distributions as seen from outside, hashed: the names of the
    .dist-info and .egg-info folders of its site-packages (each names a distribution and its
    version) with their mtimes. Any install, upgrade or removal (pip and uv add and remove those
    folders) changes it. None when the venv has no site-packages."""
    found = sorted(glob.glob(os.path.join(venv, "lib", "python*", "site-packages")))
    if not found:
        return None
    digest = hashlib.sha256()
    for site in found:
        for name in sorted(os.listdir(site)):
            if name.endswith((".dist-info", ".egg-info")):
                mtime = os.stat(os.path.join(site, name)).st_mtime_ns
                digest.update(f"{site}/{name} {mtime}\n".encode())
    return digest.hexdigest()


def checked_state(release_dir: str, versions: dict | None) -> dict:
    """What the completion marker keeps of the release's check: the versions the venv's own
    python read, and the distributions' key (dists_key) they were read at. The probe takes the
    versions from here while the key is unchanged, instead of running the venv's python."""
    if not versions:
        return {}
    return {"versions": versions, "dists": dists_key(release_dir)}


def read_marker(release_dir: str) -> dict | None:
    try:
        with open(os.path.join(release_dir, MARKER), encoding="utf-8") as fh:
            data = json.load(fh)
    except (OSError, ValueError):
        return None
    return data if isinstance(data, dict) else None


def pin_wheels(wheel_dir: str, pins: list[str]) -> tuple[list[str], list[str]]:
    """The wheel file of each pin in wheel_dir, by the name and version in its file name
    (PEP 427: name-version[-build]-python-abi-platform.whl). Returns (paths, pins without one)."""
    try:
        names = sorted(n for n in os.listdir(wheel_dir) if n.endswith(".whl"))
    except OSError:
        names = []
    files = {}
    for name in names:
        parts = name[:-4].split("-")
        if len(parts) >= 5:
            files.setdefault((norm(parts[0]), parts[1].lower()), name)
    found, lacking = [], []
    for pin in pins:
        dist, version = split_pin(pin)
        name = files.get((norm(dist), version.lower()))
        if name:
            found.append(os.path.join(wheel_dir, name))
        else:
            lacking.append(pin)
    return found, lacking


def release_size(wheels: list[str], link_mode: str, block: int = 4096,
                 bytecode: bool = False) -> dict:
    """What installing the wheels writes into a release venv, read from their zip directories.

    copy, clone and hardlink: every file's bytes, rounded up to whole blocks (clone and hardlink
    fall back to a copy where the filesystem cannot share them, and a hardlinked file is the cache's
    copy, on the same filesystem). symlink: a link per file, each taking a block (uv's
    cache paths are longer than what an inode holds inline), the .dist-info files themselves (uv
    writes RECORD and its own files there). Both: a block per folder. bytecode (compiled at
    install, in the venv whatever the link mode): 1.5 x each module's source bytes in whole blocks
    (SGLang 0.5.12's stack: 442 MiB of .pyc for 339 MiB of .py), a __pycache__ folder per folder
    of modules.
    """
    files = unpacked = meta = compiled = 0
    folders: set[str] = set()
    packages: set[str] = set()
    for path in wheels:
        with zipfile.ZipFile(path) as zf:
            for info in zf.infolist():
                if info.is_dir():
                    continue
                files += 1
                size = -(-info.file_size // block) * block
                unpacked += size
                top = info.filename.split("/", 1)[0]
                if top.endswith(".dist-info"):
                    meta += size
                if bytecode and info.filename.endswith(".py"):
                    compiled += -(-info.file_size * 3 // 2 // block) * block
                    packages.add(os.path.dirname(info.filename))
                parent = os.path.dirname(info.filename)
                while parent and parent not in folders:
                    folders.add(parent)
                    parent = os.path.dirname(parent)
    dirs = len(folders) * block
    need = files * block + meta + dirs if link_mode == "symlink" else unpacked + dirs
    need += compiled + len(packages) * block
    return {"bytes": need, "files": files, "folders": len(folders), "unpacked": unpacked,
            "bytecode": compiled, "link_mode": link_mode}
