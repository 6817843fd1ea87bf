"""Role deploy_record on this machine (local connection, records in a temporary folder), and
tests/infra reading the records: skipped on purpose -> skipped with the reason; no record ->
a loud failure."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]
VENV_BIN = Path(sys.executable).parent

PLAYBOOK = """---
- name: Record
  hosts: localhost
  gather_facts: false
  roles:
    - role: sglang_lxc.serving.deploy_record
      vars:
        deploy_record_role: demo
        deploy_record_status: "{{ status }}"
        deploy_record_reason: "{{ reason }}"
        deploy_record_version: "1.2"
        deploy_record_inputs: {venv: /opt/demo}
        deploy_record_dir: "{{ record_dir }}"
"""


def converge(tmp_path: Path, status: str, reason: str = "", *extra: str) -> str:
    playbook = tmp_path / "record.yml"
    playbook.write_text(PLAYBOOK)
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "localhost,", "-c", "local", str(playbook),
         "-e", f"ansible_python_interpreter={sys.executable}",
         "-e", json.dumps({"status": status, "reason": reason,
                           "record_dir": str(tmp_path / "deployed")}), *extra],
        cwd=tmp_path, capture_output=True, text=True, timeout=300,
        env={**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
             "SGLANG_LXC_ARTIFACTS": str(tmp_path / "artifacts")},
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return proc.stdout


def changed(output: str) -> int:
    recap = next(line for line in output.splitlines() if line.startswith("localhost "))
    return int(recap.split("changed=")[1].split()[0])


def test_record_written_once_and_rewritten_only_on_change(tmp_path):
    record = tmp_path / "deployed" / "demo.json"
    assert changed(converge(tmp_path, "skipped", "no GPU")) == 2  # folder and file
    first = json.loads(record.read_text())
    assert {k: first[k] for k in ("role", "status", "reason", "version")} == {
        "role": "demo", "status": "skipped", "reason": "no GPU", "version": "1.2"}
    assert len(first["inputs_sha256"]) == 64 and first["time"].endswith("Z")
    assert changed(converge(tmp_path, "skipped", "no GPU")) == 0  # converged: same file
    assert json.loads(record.read_text()) == first
    assert changed(converge(tmp_path, "deployed", "", "--check")) == 1
    assert json.loads(record.read_text()) == first  # check mode wrote nothing
    assert changed(converge(tmp_path, "deployed")) == 1
    assert json.loads(record.read_text())["status"] == "deployed"


def infra(tmp_path: Path, records: dict[str, dict]) -> subprocess.CompletedProcess[str]:
    folder = tmp_path / "deployed"
    folder.mkdir(exist_ok=True)
    for role, data in records.items():
        (folder / f"{role}.json").write_text(json.dumps(data))
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q", "-rs",
         str(ROOT / "tests/infra/test_sglang_serve.py"), "--hosts=local://",
         "--rootdir", str(ROOT / "tests" / "infra")],
        cwd=ROOT, capture_output=True, text=True, timeout=300,
        env={**os.environ, "SGLANG_LXC_DEPLOYED_DIR": str(folder)},
    )


def test_infra_checks_follow_the_records(tmp_path):
    skipped = infra(tmp_path, {"sglang_serve": {"role": "sglang_serve", "status": "skipped",
                                                "reason": "no GPU"}})
    assert skipped.returncode == 0, skipped.stdout + skipped.stderr
    assert "sglang_serve skipped on purpose on local: no GPU" in skipped.stdout
    assert " passed" not in skipped.stdout and " failed" not in skipped.stdout
    (tmp_path / "deployed" / "sglang_serve.json").unlink()
    missing = infra(tmp_path, {})
    assert missing.returncode == 1, missing.stdout + missing.stderr
    assert "no " + str(tmp_path / "deployed" / "sglang_serve.json") in missing.stdout
    assert "run playbooks/serve.yml" in missing.stdout
