"""Role wheelhouse's logic in Python: the fingerprint and command lines
(plugins/plugin_utils/wheelhouse.py) and a wheel folder's state
(plugins/module_utils/wheelhouse_sets.py), on real folders."""

from __future__ import annotations

import hashlib
import os

import pytest
from ansible.plugins.filter.core import to_json
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import wheelhouse as whl

from tests.loaders import ROOT, load_file

sets = load_file("wheelhouse_sets", ROOT / "plugins/module_utils/wheelhouse_sets.py")


def test_fingerprint_is_what_the_role_wrote_in_jinja():
    """Sets recorded before the filter keep their names: to_json | hash('sha256'), 16 hex."""
    spec = {"requirements": ["a==1", "b==2"], "requirements_file": "", "constraints_file": "",
            "python_version": "3.11", "platforms": ["manylinux_2_36_x86_64"],
            "implementation": "cp", "index_url": "https://example.invalid/simple",
            "extra_index_urls": [], "extra_args": ["--no-deps"], "hashes": {"a==1": "0" * 64}}
    jinja = hashlib.sha256(to_json(spec).encode()).hexdigest()[:16]
    assert whl.wheelhouse_fingerprint(spec) == jinja
    assert whl.wheelhouse_fingerprint({**spec, "python_version": "3.12"}) != jinja


def test_download_argv_puts_hashed_file_or_pins_last():
    argv = whl.wheelhouse_download_argv(
        "/py", "/dest", "3.11", ["p1", "p2"], index_url="https://i.invalid/simple",
        extra_index_urls=["https://x.invalid"], requirements_file="/r.txt",
        constraints_file="/c.txt", extra_args=["--no-deps"])
    assert argv[:5] == ["/py", "-m", "pip", "download", "--isolated"]
    assert argv[argv.index("--dest") + 1] == "/dest"
    assert "--platform=p1" in argv and "--platform=p2" in argv
    assert "--extra-index-url=https://x.invalid" in argv
    assert argv[-5:] == ["--requirement", "/r.txt", "--constraint", "/c.txt", "--no-deps"]
    pins = whl.wheelhouse_download_argv("/py", "/d", "3.11", [], isolated=False,
                                        requirements=["a==1", "uv==0.1"])
    assert "--isolated" not in pins and pins[-2:] == ["a==1", "uv==0.1"]


def test_install_argv_for_pip_and_uv_into_a_venv_or_a_prefix():
    pip = whl.wheelhouse_install_argv("pip", "/w", venv="/v", requirements_file="/w/r.txt",
                                      require_hashes=True, extra_args=["--no-deps"])
    assert pip[:4] == ["/v/bin/python", "-m", "pip", "install"]
    assert pip[-4:] == ["--requirement", "/w/r.txt", "--require-hashes", "--no-deps"]
    target = whl.wheelhouse_install_argv("pip", "/w", python="/py", target="/t",
                                         requirements=["a==1"])
    assert target[0] == "/py" and target[target.index("--target") + 1] == "/t"
    assert "--upgrade" in target and target[-1] == "a==1"
    uv = whl.wheelhouse_install_argv("/u/uv", "/w", python="/py", target="/t",
                                     requirements=["a==1"])
    assert uv[:3] == ["/u/uv", "pip", "install"]
    for flag in ("--offline", "--no-index", "--no-config"):
        assert flag in uv
    assert uv[uv.index("--python") + 1] == "/py" and uv[uv.index("--target") + 1] == "/t"
    with pytest.raises(ValueError, match="exactly one of venv and target"):
        whl.wheelhouse_install_argv("pip", "/w", venv="/v", target="/t")


def test_folder_state_lists_what_is_missing_or_cut_short(tmp_path):
    (tmp_path / "a-1-py3-none-any.whl").write_bytes(b"x" * 10)
    (tmp_path / "b-1-py3-none-any.whl").write_bytes(b"x" * 3)  # cut short
    (tmp_path / "notes.txt").write_text("not a wheel")
    want = [{"name": "a-1-py3-none-any.whl", "size": 10},
            {"name": "b-1-py3-none-any.whl", "size": 7},
            {"name": "c-1-py3-none-any.whl", "size": "5"}]
    state = sets.folder_state(str(tmp_path), want)
    assert state["exists"] and not state["read_only"]
    assert state["missing"] == ["b-1-py3-none-any.whl", "c-1-py3-none-any.whl"]
    assert state["missing_bytes"] == 12
    assert state["free_bytes"] > 0 and os.path.ismount(state["mount"])


def test_folder_state_of_a_folder_not_made_yet(tmp_path):
    state = sets.folder_state(str(tmp_path / "x" / "set"), [{"name": "a.whl", "size": 1}])
    assert not state["exists"] and state["missing"] == ["a.whl"]
