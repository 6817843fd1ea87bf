# Copyright: sglang-lxc contributors
# Apache-2.0
"""Role wheelhouse's controller-side logic: the set's fingerprint and the pip/uv command lines.

Plain Python; the filters of the same names (plugins/filter/wheelhouse.py) wrap it. A wheel
folder's state, on the target, is plugins/module_utils/wheelhouse_sets.py.
Unit-tested in tests/unit/faults/test_wheelhouse_logic.py.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence


def wheelhouse_fingerprint(spec: Mapping) -> str:
    """16 hex digits naming everything that decides a set's files: sha256 of the spec's JSON as
    Ansible's to_json writes it (so sets recorded before this filter keep their names)."""
    text = json.dumps(spec, separators=(", ", ": "))
    return hashlib.sha256(text.encode()).hexdigest()[:16]


def wheelhouse_download_argv(
    python: str,
    dest: str,
    python_version: str,
    platforms: Sequence[str],
    implementation: str = "cp",
    index_url: str = "",
    extra_index_urls: Sequence[str] = (),
    isolated: bool = True,
    requirements_file: str = "",
    constraints_file: str = "",
    requirements: Sequence[str] = (),
    extra_args: Sequence[str] = (),
) -> list[str]:
    """pip download of the set into the controller's folder, binary wheels only."""
    argv = [python, "-m", "pip", "download"] + (["--isolated"] if isolated else [])
    argv += [
        "--disable-pip-version-check",
        "--no-input",
        "--progress-bar",
        "off",
        "--only-binary=:all:",
        "--dest",
        dest,
        "--python-version",
        python_version,
        "--implementation",
        implementation,
    ]
    if index_url:
        argv += ["--index-url", index_url]
    argv += [f"--extra-index-url={u}" for u in extra_index_urls]
    argv += [f"--platform={p}" for p in platforms]
    if requirements_file:
        argv += ["--requirement", requirements_file]
    if constraints_file:
        argv += ["--constraint", constraints_file]
    return argv + list(extra_args) + list(requirements)


def wheelhouse_install_argv(
    installer: str,
    wheel_dir: str,
    *,
    python: str = "",
    venv: str = "",
    target: str = "",
    requirements_file: str = "",
    constraints_file: str = "",
    require_hashes: bool = False,
    requirements: Sequence[str] = (),
    extra_args: Sequence[str] = (),
) -> list[str]:
    """Install the set from wheel_dir with no index: into venv, or into target (--target).

    installer is "pip" or the path of a uv binary.
    """
    if bool(venv) == bool(target):
        raise ValueError("wheelhouse_install_argv: give exactly one of venv and target")
    if installer == "pip":
        argv = [
            f"{venv}/bin/python" if venv else python,
            "-m",
            "pip",
            "install",
            "--no-index",
            "--find-links",
            wheel_dir,
            "--disable-pip-version-check",
            "--no-input",
            "--progress-bar",
            "off",
            "--root-user-action=ignore",
        ]
        if target:
            argv += ["--target", target, "--upgrade"]
    else:
        argv = [
            installer,
            "pip",
            "install",
            "--no-config",
            "--offline",
            "--no-index",
            "--find-links",
            wheel_dir,
            "--python",
            f"{venv}/bin/python" if venv else python,
        ]
        if target:
            argv += ["--target", target]
    if requirements_file:
        argv += ["--requirement", requirements_file]
    if require_hashes:
        argv += ["--require-hashes"]
    if constraints_file:
        argv += ["--constraint", constraints_file]
    return argv + list(extra_args) + list(requirements)
