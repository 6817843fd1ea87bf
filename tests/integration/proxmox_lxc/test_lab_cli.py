"""`sglang-lxc lab up|status|down` end to end, on an isolated lab (own root, bridge, subnet)."""

from __future__ import annotations

import os
import re
import shutil
import subprocess

import pytest

from tests.lablib import REPO, VENV_BIN, lab_env, lab_root

pytestmark = pytest.mark.lab

BRIDGE = "lxcbrt0"


@pytest.fixture
def isolated(lab_node, tmp_path):
    root = tmp_path / "lab"
    cache = root / "var/lib/vz/template/cache"
    cache.mkdir(parents=True)
    for template in (lab_root() / "var/lib/vz/template/cache").glob("*.tar.zst"):
        try:
            os.link(template, cache / template.name)  # the cached template, not a new debootstrap
        except OSError:
            shutil.copy2(template, cache / template.name)
    env = lab_env(PCT_STANDIN_ROOT=str(root), PCT_STANDIN_LXC_PATH=str(tmp_path / "lxc"),
                  SGLANG_LXC_LAB_BRIDGE=BRIDGE, SGLANG_LXC_LAB_SUBNET="10.0.4")
    (tmp_path / "lxc").mkdir()
    yield env, tmp_path
    subprocess.run([str(VENV_BIN / "sglang-lxc"), "lab", "down"], env=env, cwd=tmp_path,
                   capture_output=True)
    subprocess.run(["ip", "link", "delete", BRIDGE], capture_output=True)


def cli(env, cwd, *args):
    return subprocess.run([str(VENV_BIN / "sglang-lxc"), *args], env=env, cwd=cwd,
                          capture_output=True, text=True, timeout=900)


def test_lab_up_status_down(isolated):
    env, cwd = isolated
    up = cli(env, cwd, "lab", "up")
    assert up.returncode == 0, up.stdout[-4000:] + up.stderr
    status = cli(env, cwd, "lab", "status")
    assert status.returncode == 0
    assert f"bridge {BRIDGE}: 10.0.4.1/24" in status.stdout
    assert "ct200" in status.stdout and "running" in status.stdout
    # the container answers on its address in the lab subnet
    ssh = subprocess.run(["ssh", "-i", str(cwd / "lab/ssh/id_ed25519"), "-o", "BatchMode=yes",
                          "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null",
                          "root@10.0.4.200", "hostname"], capture_output=True, text=True,
                         timeout=60)
    assert ssh.stdout.strip() == "ct200", ssh.stderr
    again = cli(env, cwd, "lab", "up")
    assert again.returncode == 0
    newest = max((cwd / "artifacts").iterdir(), key=lambda p: p.stat().st_mtime)
    recap = (newest / "stdout").read_text()
    assert re.search(r"localhost\s+: ok=\d+\s+changed=0\s", recap), recap[-3000:]
    down = cli(env, cwd, "lab", "down")
    assert down.returncode == 0, down.stdout[-4000:]
    lxc = subprocess.run(["lxc-ls", "-P", str(cwd / "lxc")], capture_output=True, text=True)
    assert lxc.stdout.strip() == ""
    assert subprocess.run(["ip", "link", "show", BRIDGE], capture_output=True).returncode != 0
    # the data directories of the mounts are kept
    assert (cwd / "lab/data/ct200/models").is_dir()
    again = cli(env, cwd, "lab", "down")
    assert again.returncode == 0
    assert cli(env, cwd, "lab", "status").returncode == 1


def test_missing_prerequisites_are_named(monkeypatch):
    from ansible_collections.sglang_lxc.serving.runner import lab

    monkeypatch.setattr(lab.shutil, "which", lambda cmd: None if cmd == "debootstrap" else "/x")
    problems = lab.missing_prerequisites()
    assert "packages: apt-get install -y debootstrap" in problems


def test_cli_reports_missing_prerequisites(monkeypatch, capsys):
    from ansible_collections.sglang_lxc.serving.runner import cli, lab

    monkeypatch.setattr(lab.shutil, "which", lambda cmd: None if cmd.startswith("lxc") else "/x")
    assert cli.main(["lab", "up"]) == 1  # ExitCode.ERROR: the run could not start
    assert "apt-get install -y lxc" in capsys.readouterr().err


def test_repo_root_is_where_the_playbooks_are():
    assert (REPO / "playbooks/lab.yml").is_file()
