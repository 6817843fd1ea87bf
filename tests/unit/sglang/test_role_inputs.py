"""Bad input to role `sglang` fails in validation, naming the variable, before any change.

The role runs against localhost (connection local); every case fails in tasks/validate.yml, so
nothing on this machine is touched (the venv path is a fresh temporary folder, checked after).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
FIXTURE = ROOT / "tests" / "fixtures" / "sgl_kernel_fixture"
VENV_BIN = Path(sys.executable).parent


@pytest.fixture(scope="module")
def play(tmp_path_factory) -> Path:
    d = tmp_path_factory.mktemp("sglang-inputs")
    (d / "inv.yml").write_text(
        "all:\n  children:\n    sglang_servers:\n      hosts:\n        local:\n"
        "          ansible_connection: local\n"
        f"          ansible_python_interpreter: {sys.executable}\n"
    )
    (d / "play.yml").write_text(
        "- name: sglang inputs\n  hosts: sglang_servers\n  gather_facts: false\n"
        "  roles:\n    - role: sglang_lxc.serving.sglang\n"
    )
    return d


def run(play: Path, extra: dict) -> subprocess.CompletedProcess:
    base = {
        "sglang_venv": str(play / "venv"),
        "sglang_stack_enabled": False,
        "sglang_kernel_from_source": True,
        "sglang_cuda_env_file": "",
        "sglang_kernel_source_dir": str(FIXTURE),
        "sglang_kernel_source_subdir": "",
        "sglang_kernel_work_dir": str(play / "work"),
        "sglang_kernel_source_cache_dir": str(play / "cache"),
        "sglang_kernel_build_lock_dir": str(play / "locks"),
    }
    env = dict(
        os.environ,
        ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        PATH=os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "")]),
    )
    return subprocess.run(
        [
            str(VENV_BIN / "ansible-playbook"),
            "-i",
            str(play / "inv.yml"),
            str(play / "play.yml"),
            "-e",
            json.dumps({**base, **extra}),
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


@pytest.fixture(scope="module")
def git_repo(tmp_path_factory) -> Path:
    repo = tmp_path_factory.mktemp("repo")
    git = ["git", "-C", str(repo), "-c", "user.email=t@example.invalid", "-c", "user.name=t"]
    subprocess.run(["git", "init", "-q", str(repo)], check=True)
    (repo / "README").write_text("x\n")
    subprocess.run([*git, "add", "README"], check=True)
    subprocess.run([*git, "commit", "-qm", "x"], check=True)
    subprocess.run([*git, "tag", "v1"], check=True)
    return repo


CASES = [
    ({"sglang_version": "0.5.99"}, "sglang_version '0.5.99' has no lock"),
    ({"sglang_kernel_nvcc_threads": 0}, "sglang_kernel_nvcc_threads must be a number > 0"),
    (
        {"sglang_kernel_build_per_thread_gb": -1},
        "sglang_kernel_build_per_thread_gb must be a number > 0",
    ),
    (
        {"sglang_kernel_build_reserve_gb": -0.5},
        "sglang_kernel_build_reserve_gb must be a number >= 0",
    ),
    ({"sglang_kernel_max_jobs": -1}, "sglang_kernel_max_jobs must be a number >= 0"),
    ({"sglang_kernel_build_timeout": 0}, "sglang_kernel_build_timeout must be a number > 0"),
    ({"sglang_kernel_build_per_thread_gb": "lots"}, "sglang_kernel_build_per_thread_gb"),
    ({"sglang_kernel_cuda_archs": ["sm120"]}, "sglang_kernel_cuda_archs"),
    ({"sglang_kernel_source_dir": "/nonexistent"}, "sglang_kernel_source_dir"),
]


@pytest.mark.parametrize(("extra", "message"), CASES, ids=[next(iter(c[0])) for c in CASES])
def test_bad_input_is_rejected_before_any_change(play, extra, message):
    proc = run(play, extra)
    assert proc.returncode != 0, proc.stdout
    assert message in " ".join(proc.stdout.split()), proc.stdout[-3000:]
    assert "changed=0" in proc.stdout
    assert not (play / "venv").exists()
    assert not (play / "work").exists()


def test_nonexistent_git_ref_is_rejected(play, git_repo):
    proc = run(
        play,
        {
            "sglang_kernel_source_dir": "",
            "sglang_kernel_source_git_url": f"file://{git_repo}",
            "sglang_kernel_source_git_ref": "v9-does-not-exist",
        },
    )
    assert proc.returncode != 0
    assert "sglang_kernel_source_git_ref: no branch or tag v9-does-not-exist" in proc.stdout
    assert "changed=0" in proc.stdout
    assert not (play / "cache").exists()


def test_unreadable_git_url_is_rejected(play, tmp_path):
    proc = run(
        play,
        {
            "sglang_kernel_source_dir": "",
            "sglang_kernel_source_git_url": f"file://{tmp_path}/nope",
            "sglang_kernel_source_git_ref": "v1",
        },
    )
    assert proc.returncode != 0
    assert "sglang_kernel_source_git_url: cannot read" in proc.stdout


def test_python_that_does_not_match_the_lock_is_rejected(play):
    proc = run(play, {"sglang_stack_enabled": True, "sglang_python": "/nonexistent/python3"})
    assert proc.returncode != 0
    assert "sglang_python /nonexistent/python3 is not runnable" in " ".join(proc.stdout.split())
    assert not (play / "venv").exists()
