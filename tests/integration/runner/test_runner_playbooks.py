"""Real playbooks through ``sglang-lxc run`` on this machine (local connection; one host is
127.0.0.2 port 1 over ssh, unreachable on purpose). No LXC needed."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path

import pytest

PLAYBOOKS = Path(__file__).parent / "playbooks"
CLI = "ansible_collections.sglang_lxc.serving.runner.cli"  # what the sglang-lxc command runs
INVENTORY = PLAYBOOKS / "inventory.yml"
SECRET = "sk-TOPSECRET-4f1c9e"  # api_key in playbooks/secret.yml


@dataclass
class Run:
    rc: int
    output: str
    run_dir: Path
    todo: dict

    @property
    def items(self) -> dict[str, dict]:
        return {t["id"]: t for t in self.todo["todos"]}


def command(tmp_path: Path, playbook: str, *extra: str) -> list[str]:
    return [sys.executable, "-m", CLI, "run", "-i", str(INVENTORY),
            str(PLAYBOOKS / playbook), "--artifacts", str(tmp_path / "artifacts"), *extra]


def environment() -> dict[str, str]:
    return {**os.environ, "CI": "1", "PYTHONUNBUFFERED": "1"}


def finished(tmp_path: Path, rc: int, output: str) -> Run:
    run_dir = (tmp_path / "artifacts" / "latest").resolve()
    todo = json.loads((run_dir / "todo.json").read_text())
    return Run(rc=rc, output=output, run_dir=run_dir, todo=todo)


def run(tmp_path: Path, playbook: str, *extra: str) -> Run:
    proc = subprocess.run(command(tmp_path, playbook, *extra), cwd=tmp_path, env=environment(),
                          capture_output=True, text=True, timeout=300)
    return finished(tmp_path, proc.returncode, proc.stdout + proc.stderr)


def status(tmp_path: Path, *extra: str, columns: int = 80) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", CLI, "status", "--artifacts",
         str(tmp_path / "artifacts"), *extra],
        capture_output=True, text=True, timeout=60,
        env={**environment(), "COLUMNS": str(columns)},
    )


def test_all_ok(tmp_path):
    result = run(tmp_path, "all_ok.yml")
    assert result.rc == 0, result.output
    items = result.items
    assert [(t["content"], t["status"], t["priority"], t["details"]) for t in items.values()] == [
        ("Install CUDA 13 toolchain on alpha", "completed", "high", "MAX_JOBS=20"),
        ("Launch 8 SGLang instances on alpha", "completed", "medium", "8/8 healthy"),
        ("Plain play without todo vars on alpha", "completed", "medium", ""),
    ]
    assert all(t["host"] == "alpha" and 1 <= t["tasks_done"] <= t["tasks_total"]
               for t in items.values())
    assert result.todo["run"]["status"] == "successful"
    assert result.todo["run"]["exit_code"] == 0
    # every item was listed pending before the first one moved (the live view reads todo.json
    # four times a second: a play of milliseconds may be seen in progress or already completed)
    lines = result.output.splitlines()
    first_progress = next(i for i, line in enumerate(lines)
                          if line.startswith(("[in_progress]", "[completed]", "[failed]")))
    assert sum(line.startswith("[pending]") for line in lines[:first_progress]) == 3
    # Markdown and JUnit next to todo.json
    assert ("| [x] | Install CUDA 13 toolchain on alpha | high | completed | changed 0 "
            "| MAX_JOBS=20 |") in (result.run_dir / "todo.md").read_text()
    junit = ET.parse(result.run_dir / "junit.xml").getroot()
    assert (junit.get("tests"), junit.get("failures")) == ("3", "0")
    # ansible-playbook runs on ansible-runner's pseudo-terminal: still no colours in any file
    files = [p for p in result.run_dir.rglob("*") if p.is_file()]
    assert "stdout" in {p.name for p in files}
    assert all(b"\x1b[" not in p.read_bytes() for p in files)
    # `sglang-lxc status` prints the same checklist again
    again = status(tmp_path, "--format", "json")
    assert again.returncode == 0 and json.loads(again.stdout) == result.todo
    plain = status(tmp_path, "--format", "plain")
    assert ("[completed] (high) Install CUDA 13 toolchain on alpha — MAX_JOBS=20 — "
            "ok 2 · changed 0") in plain.stdout
    table = status(tmp_path, columns=160)
    assert table.returncode == 0 and "Launch 8 SGLang instances on alpha" in table.stdout


def test_failing_task(tmp_path):
    result = run(tmp_path, "failing.yml")
    assert result.rc == 2, result.output
    stop, install = result.items["1-alpha"], result.items["2-alpha"]
    assert stop["status"] == "failed"
    assert stop["task"] == "Training | Stop them"
    assert "no permission to stop pid 42" in stop["message"]
    assert install["status"] == "cancelled"
    assert install["message"] == "not run: alpha failed earlier (Stop training on alpha)"
    junit = ET.parse(result.run_dir / "junit.xml").getroot()
    assert junit.get("failures") == "1"
    assert "[failed] (high) Stop training on alpha" in result.output


def test_unreachable_host(tmp_path):
    result = run(tmp_path, "unreachable.yml")
    assert result.rc == 3, result.output
    ghost = result.items["1-ghost"]
    assert ghost["status"] == "failed" and ghost["unreachable"] is True
    assert ghost["message"].startswith("unreachable:")
    assert result.items["1-alpha"]["status"] == "completed"
    assert result.todo["run"]["status"] == "unreachable"
    failure = ET.parse(result.run_dir / "junit.xml").getroot().find(".//failure")
    assert failure is not None and failure.get("type") == "unreachable"


def test_skipped_milestones(tmp_path):
    result = run(tmp_path, "skipped.yml")
    assert result.rc == 0, result.output
    launch, build = result.items["1-alpha"], result.items["2-alpha"]
    assert (launch["status"], launch["message"]) == (
        "skipped", "skipped: gpu_count <= 0")
    assert (build["status"], build["message"], build["priority"]) == ("skipped", "no GPU", "low")


def test_two_hosts_one_fails_the_other_completes(tmp_path):
    result = run(tmp_path, "two_hosts.yml")
    assert result.rc == 2, result.output
    items = result.items
    assert items["1-alpha"]["status"] == "failed"
    assert items["1-alpha"]["message"] == "disk full on alpha"
    assert items["1-beta"]["status"] == "completed"  # its failure was rescued
    assert items["2-alpha"]["status"] == "cancelled"
    assert items["2-beta"]["status"] == "completed"


def test_limit_and_extra_args_reach_planner_and_ansible(tmp_path):
    result = run(tmp_path, "two_hosts.yml", "--limit", "beta")
    assert result.rc == 0, result.output
    assert sorted(result.items) == ["1-beta", "2-beta"]


def descendant_running(root: int, argv: list[str]) -> int | None:
    """The pid of a process below ``root`` whose command line is ``argv``, or None."""
    parent: dict[int, int] = {}
    cmdline: dict[int, list[str]] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
            raw = (entry / "cmdline").read_bytes()
        except OSError:  # gone meanwhile
            continue
        pid = int(entry.name)
        parent[pid] = int(stat.rsplit(")", 1)[1].split()[1])
        cmdline[pid] = raw.decode(errors="replace").split("\0")[:-1]
    for pid, args in cmdline.items():
        if args != argv:
            continue
        up = parent.get(pid, 0)
        while up > 1:
            if up == root:
                return pid
            up = parent.get(up, 0)
    return None


def test_interrupt_leaves_an_accurate_checklist(tmp_path):
    proc = subprocess.Popen(command(tmp_path, "interrupt.yml"), cwd=tmp_path, env=environment(),
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: list[str] = []
    deadline = time.monotonic() + 120
    # a runner that wedged without a line would block the read below: it is killed (the test
    # then fails on what it printed) rather than left to hang the suite
    watchdog = threading.Timer(600, proc.kill)
    watchdog.start()
    assert proc.stdout is not None
    for line in proc.stdout:
        seen.append(line)
        if line.startswith("[in_progress]") and "Long build on alpha" in line:
            break
        assert time.monotonic() < deadline, "".join(seen)
    else:
        pytest.fail("the run ended before the long build started:\n" + "".join(seen))
    # inside `sleep 60`: the task's command runs, a process of this run
    while descendant_running(proc.pid, ["sleep", "60"]) is None:
        assert time.monotonic() < deadline, "".join(seen)
        time.sleep(0.1)
    proc.send_signal(signal.SIGINT)
    # a deadline only: the checklist below tells an interrupted run from one that waited
    rest, _ = proc.communicate(timeout=300)
    watchdog.cancel()
    result = finished(tmp_path, proc.returncode, "".join(seen) + rest)
    assert result.rc == 130, result.output
    items = result.items
    assert items["1-alpha"]["status"] == "completed"
    # ended by the interrupt, inside the sleep: a sleep that had run out would have completed
    # this item and started the next play
    assert items["2-alpha"]["status"] == "cancelled"
    assert items["2-alpha"]["message"] == "interrupted during 'Build | Sleep'"
    assert items["3-alpha"]["status"] == "cancelled"
    assert items["3-alpha"]["message"] == "interrupted before it ran"
    assert result.todo["run"]["status"] == "interrupted"
    assert "[cancelled]" in result.output


@pytest.mark.parametrize("extra", [(), ("--ansible-output", "--keep-events")],
                         ids=["default", "ansible-output"])
def test_no_log_secret_appears_in_no_output(tmp_path, extra):
    result = run(tmp_path, "secret.yml", *extra)
    assert result.rc == 2, result.output
    item = result.items["1-alpha"]
    assert item["status"] == "failed"
    assert item["message"] == "output hidden (no_log)"
    assert SECRET not in result.output
    checked = []
    for path in result.run_dir.rglob("*"):
        if path.is_file():
            assert SECRET.encode() not in path.read_bytes(), path
            checked.append(path.name)
    assert {"todo.json", "todo.md", "junit.xml", "stdout"} <= set(checked)
    assert SECRET not in status(tmp_path).stdout
    if extra:
        assert "[sglang-lxc: output of a no_log task removed]" in result.output


def test_serial_batches_stay_one_milestone_per_host(tmp_path):
    result = run(tmp_path, "serial.yml")
    assert result.rc == 0, result.output
    assert [(t["id"], t["status"], t["details"]) for t in result.items.values()] == [
        ("1-alpha", "completed", "restarted"),
        ("1-beta", "completed", "restarted"),
        ("2-alpha", "completed", ""),
    ]
