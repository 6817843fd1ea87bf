"""The stack's logic (plugins/module_utils/sglang_stack.py) and the probe, on real venvs.

The probe and the installer run the venv's own python; these tests make real venvs with the
interpreter running pytest (no pip in them: `python -m venv --without-pip`) and fake nothing.
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
import zipfile

import pytest
from ansible_collections.sglang_lxc.serving.plugins.module_utils import sglang_stack as stack
from ansible_collections.sglang_lxc.serving.plugins.module_utils import (
    sglang_stack_probe as probe_mod,
)
from ansible_collections.sglang_lxc.serving.plugins.module_utils import uv_tool
from ansible_collections.sglang_lxc.serving.plugins.modules import sglang_stack_release as release

from tests.venvs import make_venv

PINS = ["idna==3.10", "Nest_Asyncio==1.6.0", "six==1.17.0"]


def test_probe_reads_the_interpreter_version_in_the_same_call(tmp_path):
    """The role's Python check uses what the probe read: major.minor, or None when the
    interpreter does not run (the check then says "not runnable")."""
    running = f"{sys.version_info.major}.{sys.version_info.minor}"
    assert probe_mod.python_version(sys.executable) == running
    assert probe_mod.python_version(str(tmp_path / "no-python")) is None
    fails = tmp_path / "fails"
    fails.write_text("#!/bin/sh\nexit 3\n")
    fails.chmod(0o755)
    assert probe_mod.python_version(str(fails)) is None
    assert probe_mod.python_version("") is None


def test_drift_names_missing_wrong_and_extra_with_normalised_names():
    installed = {"idna": "3.9", "nest-asyncio": "1.6.0", "pip": "23.0", "requests": "2.0",
                 "sgl_kernel": "0.3"}
    d = stack.drift(PINS, installed, ignore_extra=["sgl-kernel"])
    assert d == {"missing": ["six==1.17.0"], "wrong": [{"pin": "idna==3.10", "found": "3.9"}],
                 "extra": ["requests==2.0"]}
    assert stack.drift(PINS, {"IDNA": "3.10", "nest.asyncio": "1.6.0", "six": "1.17.0"}) == {
        "missing": [], "wrong": [], "extra": []}


def test_describe_says_which_pins_would_change():
    line = stack.describe({"missing": ["a==1"], "wrong": [{"pin": "b==2", "found": "1"}],
                           "extra": []})
    assert line == "1 missing (a==1); 1 at another version (b==2 (found 1))"
    many = stack.describe({"missing": [f"p{i}==1" for i in range(20)]}, limit=2)
    assert many == "20 missing (p0==1, p1==1, ...)"


def test_requirements_need_an_exact_pin_and_its_sha256():
    digest = "a" * 64
    assert stack.requirements_text(["x==1"], {"x==1": digest}) == f"x==1 --hash=sha256:{digest}\n"
    with pytest.raises(ValueError, match="no sha256 for y==2"):
        stack.requirements_text(["y==2"], {})
    with pytest.raises(ValueError, match="not an exact pin"):
        stack.requirements_text(["z>=1"], {"z>=1": digest})


def test_uv_command_lines_are_offline_with_hashes():
    argv = stack.uv_install_argv("/u/uv", "/v", "/w", "/r.txt", True, ["--no-deps"])
    assert argv[:3] == ["/u/uv", "pip", "install"]
    for flag in ("--offline", "--no-index", "--no-config", "--require-hashes", "--no-deps"):
        assert flag in argv
    assert argv[argv.index("--find-links") + 1] == "/w"
    assert argv[argv.index("--python") + 1] == "/v/bin/python"
    env = uv_tool.uv_env("/c", "hardlink")
    assert env["UV_CACHE_DIR"] == "/c" and env["UV_LINK_MODE"] == "hardlink"
    assert env["UV_OFFLINE"] == "1" and "UV_NO_CACHE" not in env
    assert uv_tool.uv_env("", "copy")["UV_NO_CACHE"] == "1"
    pip = stack.pip_install_argv("/v", "/w", "/r.txt", False, [])
    assert pip[:4] == ["/v/bin/python", "-m", "pip", "install"] and "--require-hashes" not in pip


def test_bytecode_is_compiled_at_install_unless_turned_off():
    """uv compiles nothing unless asked; pip compiles unless told not to."""
    assert "--compile-bytecode" in stack.uv_install_argv("/u/uv", "/v", "/w", "/r.txt")
    off = stack.uv_install_argv("/u/uv", "/v", "/w", "/r.txt", compile_bytecode=False)
    assert "--compile-bytecode" not in off
    assert "--no-compile" not in stack.pip_install_argv("/v", "/w", "/r.txt")
    assert "--no-compile" in stack.pip_install_argv("/v", "/w", "/r.txt", compile_bytecode=False)


def fake_uv_wheel(path, payload=b"#!/bin/sh\necho uv 0.0.0\n"):
    with zipfile.ZipFile(path, "w") as zf:
        zf.writestr("uv/__init__.py", "")
        zf.writestr("uv-0.0.0.data/scripts/uv", payload)
        zf.writestr("uv-0.0.0.data/scripts/uvx", b"x")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_ensure_uv_checks_the_sha256_then_extracts_once(tmp_path):
    wheel = tmp_path / "uv-0.0.0-py3-none-any.whl"
    digest = fake_uv_wheel(wheel)
    with pytest.raises(ValueError, match="does not match the lock's sha256"):
        uv_tool.ensure_uv(str(wheel), "0" * 64, str(tmp_path / "bin"))
    assert not (tmp_path / "bin" / "uv").exists()
    path, changed = uv_tool.ensure_uv(str(wheel), digest, str(tmp_path / "bin"))
    assert changed and subprocess.run([path], capture_output=True, text=True).stdout == "uv 0.0.0\n"
    assert uv_tool.ensure_uv(str(wheel), digest, str(tmp_path / "bin")) == (path, False)
    assert sorted(p.name for p in (tmp_path / "bin").iterdir()) == ["uv"]  # no temp left


def release_tree(tmp_path, release: str, dists: dict[str, str], marker: bool = True):
    releases = tmp_path / "venvs"
    rel = make_venv(releases / release, dists)
    if marker:
        (rel / stack.MARKER).write_text(json.dumps({"release": release}))
    (tmp_path / "venv").symlink_to(f"venvs/{release}")
    return str(tmp_path / "venv")


def test_probe_calls_a_complete_release_at_the_lock_current(tmp_path):
    venv = release_tree(tmp_path, "r1", {"idna": "3.10", "nest-asyncio": "1.6.0", "six": "1.17.0"})
    r = probe_mod.probe(venv, "r1", PINS, [])
    assert r["drifted"] is False and r["release_current"] is True
    assert r["reasons"] == [] and r["link"].endswith("/venvs/r1")


def test_probe_never_calls_an_unmarked_release_current(tmp_path):
    """An interrupted install leaves a release without its marker: drift, whatever it holds."""
    venv = release_tree(tmp_path, "r1", {"idna": "3.10", "nest-asyncio": "1.6.0", "six": "1.17.0"},
                        marker=False)
    r = probe_mod.probe(venv, "r1", PINS, [])
    assert r["drifted"] and not r["release_current"]
    assert "no completion marker" in r["reasons"][0]


def test_probe_reports_each_pin_that_would_change(tmp_path):
    venv = release_tree(tmp_path, "r1", {"idna": "3.9", "six": "1.17.0", "left-over": "1"})
    r = probe_mod.probe(venv, "r2", PINS, [])
    assert r["drifted"]
    assert r["missing"] == ["Nest_Asyncio==1.6.0"]
    assert r["wrong"] == [{"pin": "idna==3.10", "found": "3.9"}]
    assert r["extra"] == ["left-over==1"]
    assert "serves release r1, the lock asks for r2" in r["reasons"][0]


def test_probe_of_a_missing_venv_lists_every_pin(tmp_path):
    r = probe_mod.probe(str(tmp_path / "venv"), "r1", PINS, [])
    assert r["drifted"] and r["missing"] == PINS and r["link"] is None


def test_repair_builds_beside_the_current_release(tmp_path):
    current = str(tmp_path / "r1")
    assert release.new_release_dir(str(tmp_path), "r1", None, repair=False) == current
    beside = release.new_release_dir(str(tmp_path), "r1", current, repair=True)
    # the live folder is never rebuilt in place, whatever made the probe call it drifted
    assert release.new_release_dir(str(tmp_path), "r1", current, repair=False) != current
    assert beside.startswith(current + ".") and beside != current
    assert release.new_release_dir(str(tmp_path), "r2", current, repair=True).endswith("/r2")


def test_probe_takes_the_checked_versions_from_the_marker_until_the_venv_changes(tmp_path):
    """The release's check leaves its versions and the distributions' key in the marker: the
    probe reads them without running the venv's python, until any distribution changes."""
    dists = {"idna": "3.10", "nest-asyncio": "1.6.0", "six": "1.17.0"}
    venv = release_tree(tmp_path, "r1", dists)
    rel = tmp_path / "venvs/r1"
    versions = {"idna": "3.10", "nest-asyncio": "1.6.0", "six": "1.17.0"}
    marker = {"release": "r1", **stack.checked_state(str(rel), versions)}
    (rel / stack.MARKER).write_text(json.dumps(marker))
    r = probe_mod.probe(venv, "r1", PINS, [])
    assert r["versions_from"] == "marker" and r["drifted"] is False
    # the check's versions are judged against today's lock: a stricter lock still drifts
    r = probe_mod.probe(venv, "r1", [*PINS, "certifi==2025.1.31"], [])
    assert r["missing"] == ["certifi==2025.1.31"] and r["drifted"]
    # someone installs into the venv: a new .dist-info folder, the venv's python reads again
    make_dist(rel, "left-over", "1")
    r = probe_mod.probe(venv, "r1", PINS, [])
    assert r["versions_from"] == "venv" and r["extra"] == ["left-over==1"] and r["drifted"]


def make_dist(venv, name, version):
    site = next(venv.glob("lib/python3*/site-packages"))
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_a_release_that_passed_its_check_keeps_its_versions_in_the_marker(tmp_path):
    rel = make_venv(tmp_path / "r1", {"idna": "3.10"})
    p = {"pins": ["idna==3.10"], "ignore_extra": [], "imports": []}
    with open(tmp_path / "lock", "w") as lock:  # the releases lock, kept by the check's process
        assert release.check_release(str(rel), p, lock.fileno()) == []
    assert p["checked_versions"] == {"idna": "3.10"}
    state = stack.checked_state(str(rel), p["checked_versions"])
    assert state["dists"] == stack.dists_key(str(rel)) and state["versions"] == {"idna": "3.10"}
    assert stack.checked_state(str(rel), None) == {}
