"""The todo callback under plain ansible-playbook, the counts, ansible-playbook's options through
``sglang-lxc run``, and the runner's process tree and dead runs. Local connection only."""

from __future__ import annotations

import json
import os
import pty
import re
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.runner.test_runner_playbooks import (
    CLI,
    INVENTORY,
    PLAYBOOKS,
    environment,
    finished,
    run,
    status,
)

ROOT = Path(__file__).resolve().parents[3]
VENV_BIN = Path(sys.executable).parent
ANSI = re.compile(rb"\x1b\[")


def ansible_playbook(tmp_path: Path, playbook: str, *extra: str, tty: bool = False,
                     env: dict[str, str] | None = None) -> tuple[int, str]:
    """Plain ``ansible-playbook`` from the checkout's venv, as a user runs it."""
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(INVENTORY), str(PLAYBOOKS / playbook),
            *extra]
    run_env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
               "SGLANG_LXC_ARTIFACTS": str(tmp_path / "artifacts"), **(env or {})}
    run_env.pop("CI", None)
    if not tty:
        proc = subprocess.run(argv, cwd=tmp_path, env=run_env, capture_output=True, text=True,
                              timeout=300)
        return proc.returncode, proc.stdout + proc.stderr
    main, secondary = pty.openpty()
    proc = subprocess.Popen(argv, cwd=tmp_path, env=run_env, stdin=subprocess.DEVNULL,
                            stdout=secondary, stderr=secondary, close_fds=True)
    os.close(secondary)
    chunks = []
    while True:
        ready, _, _ = select.select([main], [], [], 60)
        if not ready:
            break
        try:
            data = os.read(main, 65536)
        except OSError:  # the other side closed
            break
        if not data:
            break
        chunks.append(data)
    os.close(main)
    return proc.wait(timeout=60), b"".join(chunks).decode(errors="replace")


def latest(tmp_path: Path) -> tuple[Path, dict]:
    run_dir = (tmp_path / "artifacts" / "latest").resolve()
    return run_dir, json.loads((run_dir / "todo.json").read_text())


def test_plain_ansible_playbook_writes_the_checklist(tmp_path):
    rc, output = ansible_playbook(tmp_path, "all_ok.yml")
    assert rc == 0, output
    assert "TODO" not in output  # no live view when stdout is not a terminal
    run_dir, todo = latest(tmp_path)
    assert run_dir.parent == tmp_path / "artifacts"
    assert [(t["content"], t["status"], t["details"]) for t in todo["todos"]] == [
        ("Install CUDA 13 toolchain on alpha", "completed", "MAX_JOBS=20"),
        ("Launch 8 SGLang instances on alpha", "completed", "8/8 healthy"),
        ("Plain play without todo vars on alpha", "completed", ""),
    ]
    assert todo["run"]["status"] == "successful" and todo["run"]["exit_code"] == 0
    assert {"todo.json", "todo.md", "junit.xml"} <= {p.name for p in run_dir.iterdir()}
    again = status(tmp_path, "--format", "plain")
    assert "[completed] (high) Install CUDA 13 toolchain on alpha" in again.stdout


def test_live_checklist_only_on_a_terminal_and_no_ansi_in_files(tmp_path):
    rc, output = ansible_playbook(tmp_path, "two_hosts.yml", tty=True)
    assert rc == 2, output
    assert re.search(r"TODO \d/4 ✘ Prepare alpha — .*: disk full on alpha", output), output
    assert "TODO ✘ failed Prepare alpha" in output  # the list at the end
    assert "TODO 2 completed, 1 failed, 1 cancelled · exit 2" in output
    run_dir, _ = latest(tmp_path)
    for path in run_dir.rglob("*"):
        if path.is_file():
            assert not ANSI.search(path.read_bytes()), path


def test_counts_add_up_with_loops_includes_handlers_and_add_host(tmp_path):
    result = run(tmp_path, "counts.yml")
    assert result.rc == 0, result.output
    work, added = result.items["1-alpha"], result.items["2-added"]
    # loop, include, 2 included tasks, changed, skipped, add_host, handler: each once
    assert (work["tasks_done"], work["tasks_total"]) == (8, 8)
    assert (work["ok"], work["changed"], work["failed"], work["skipped"]) == (9, 2, 0, 1)
    assert (added["status"], added["tasks_done"], added["tasks_total"]) == ("completed", 1, 1)
    for item in result.todo["todos"]:
        assert item["tasks_done"] <= item["tasks_total"]
    assert "| changed 2 |" in (result.run_dir / "todo.md").read_text()
    assert "[completed] (medium) Counted work on alpha — ok 9 · changed 2 · skipped 1" in (
        result.output)


def test_any_errors_fatal_stops_the_other_hosts_items(tmp_path):
    result = run(tmp_path, "fatal.yml")
    assert result.rc == 2, result.output
    items = result.items
    assert (items["1-alpha"]["status"], items["1-alpha"]["message"]) == (
        "failed", "alpha is broken")
    assert items["1-beta"]["status"] == "cancelled"
    assert items["1-beta"]["message"] == (
        "stopped: alpha failed in 'Fatal | Fail on alpha' (any_errors_fatal)")
    assert {items["2-alpha"]["status"], items["2-beta"]["status"]} == {"cancelled"}


def test_repeated_and_inline_inventories(tmp_path):
    dest = tmp_path / "out.txt"
    result = run(tmp_path, "compat.yml", "-i", "gamma,", "-l", "alpha,gamma",
                 "-e", f"compat_dest={dest}", "-c", "local",
                 "-e", "ansible_python_interpreter=" + sys.executable)
    assert result.rc == 0, result.output
    assert sorted(result.items) == ["1-alpha", "1-gamma"]


def test_inline_host_list_alone(tmp_path):
    dest = tmp_path / "out.txt"
    proc = subprocess.run(
        [sys.executable, "-m", CLI, "run", str(PLAYBOOKS / "compat.yml"),
         "-i", "localhost,", "-c", "local", "-e", f"compat_dest={dest}",
         "-e", "ansible_python_interpreter=" + sys.executable,
         "--artifacts", str(tmp_path / "artifacts")],
        cwd=tmp_path, env=environment(), capture_output=True, text=True, timeout=300)
    result = finished(tmp_path, proc.returncode, proc.stdout + proc.stderr)
    assert result.rc == 0, result.output
    assert list(result.items) == ["1-localhost"]
    assert dest.read_text() == "none\n"


def test_tags_extra_vars_file_check_and_diff(tmp_path):
    dest = tmp_path / "out.txt"
    varsfile = tmp_path / "vars.yml"
    varsfile.write_text(f"compat_dest: {dest}\ncompat_value: from-file\n")
    result = run(tmp_path, "compat.yml", "-l", "alpha", "-t", "two", "-e", f"@{varsfile}")
    assert result.rc == 0, result.output
    item = result.items["1-alpha"]
    assert (item["tasks_total"], item["tasks_done"], item["changed"]) == (1, 1, 0)
    assert not dest.exists()  # tag "one" did not run
    result = run(tmp_path, "compat.yml", "-l", "alpha", "-e", f"@{varsfile}", "--check",
                 "--diff", "--ansible-output")
    assert result.rc == 0, result.output
    assert result.items["1-alpha"]["changed"] == 1
    assert "+from-file" in result.output  # the diff
    assert not dest.exists()  # check mode
    result = run(tmp_path, "compat.yml", "-l", "alpha", "-e", f"@{varsfile}")
    assert result.rc == 0 and dest.read_text() == "from-file\n"


def test_step_is_refused_with_a_reason(tmp_path):
    proc = subprocess.run(
        [sys.executable, "-m", CLI, "run", "-i", str(INVENTORY),
         str(PLAYBOOKS / "all_ok.yml"), "--step", "--artifacts", str(tmp_path / "artifacts")],
        env=environment(), capture_output=True, text=True, timeout=60)
    assert proc.returncode == 64, proc.stderr
    assert "--step asks before every task" in proc.stderr
    assert "ansible-playbook --step" in proc.stderr
    assert not (tmp_path / "artifacts").exists()


def _pids_with(marker: str) -> list[int]:
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                cmdline = Path(f"/proc/{entry}/cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if marker.encode() in cmdline and b"sleep" in cmdline and b"setsid" not in cmdline:
                found.append(int(entry))
    return found


def _wait_for(predicate, timeout: float, what: str) -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.2)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_ends_the_whole_process_tree(tmp_path, sig):
    marker = f"86{os.getpid() % 1000:03d}{int(sig)}"  # sleep 86xxx1 / 86xxx2: unique to us
    proc = subprocess.Popen(
        [sys.executable, "-m", CLI, "run", "-i", str(INVENTORY),
         str(PLAYBOOKS / "tree.yml"), "-e", f"tree_marker={marker}",
         "--artifacts", str(tmp_path / "artifacts")],
        cwd=tmp_path, env=environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True)
    try:
        _wait_for(lambda: len(_pids_with(marker)) == 2, 120, "the task's children never started")
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
        assert proc.returncode == 130, out
        _wait_for(lambda: not _pids_with(marker), 10, f"left running: {_pids_with(marker)}")
        _, todo = latest(tmp_path)
        assert todo["todos"][0]["status"] == "cancelled"
        assert todo["run"]["status"] == "interrupted"
    finally:
        for pid in _pids_with(marker):  # only ours: the marker is in their command line
            os.kill(pid, signal.SIGKILL)
        if proc.poll() is None:
            proc.kill()


def test_status_tells_a_dead_run_from_a_running_one(tmp_path):
    argv = [str(VENV_BIN / "ansible-playbook"), "-i", str(INVENTORY),
            str(PLAYBOOKS / "interrupt.yml")]
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
           "SGLANG_LXC_ARTIFACTS": str(tmp_path / "artifacts")}
    proc = subprocess.Popen(argv, cwd=tmp_path, env=env, stdout=subprocess.DEVNULL,
                            stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        def in_build() -> bool:
            try:
                _, todo = latest(tmp_path)
            except (OSError, ValueError):
                return False
            return todo["todos"][1]["status"] == "in_progress"

        _wait_for(in_build, 120, "the build never started")
        running = status(tmp_path, "--format", "plain")
        assert "· running" in running.stdout.splitlines()[0], running.stdout
        os.killpg(proc.pid, signal.SIGKILL)  # the whole run dies at once, as with kill -9
        proc.wait(timeout=30)
        dead = status(tmp_path, "--format", "plain")
        header = dead.stdout.splitlines()[0]
        assert "· dead" in header and f"pid {proc.pid}" in header, dead.stdout
        assert "[in_progress] (medium) Long build on alpha" in dead.stdout  # last known state
        as_json = json.loads(status(tmp_path, "--format", "json").stdout)
        assert as_json["run"]["status"] == "dead"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_the_callback_documents_its_options():
    proc = subprocess.run([str(VENV_BIN / "ansible-doc"), "-t", "callback",
                           "sglang_lxc.serving.todo"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
                               "ANSIBLE_NOCOLOR": "1"})
    assert proc.returncode == 0, proc.stderr
    for text in ("artifacts_dir", "SGLANG_LXC_ARTIFACTS", "callback_todo", "SGLANG_LXC_TODO_LIVE"):
        assert text in proc.stdout
