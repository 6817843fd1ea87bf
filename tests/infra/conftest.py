"""testinfra checks after a deploy: the tools they need, and what each role recorded.

- The README's command, ``.venv/bin/pytest tests/infra --hosts=ansible://sglang_servers
  --ansible-inventory=inventory/mysite``, works without the venv on PATH: testinfra runs
  ``ansible-inventory`` by name, so the interpreter's own bin folder goes first on PATH.
- One SSH connection per host: testinfra's ssh backend multiplexes over ansible.cfg's
  ``control_path`` (about 70 ms a command instead of about 740 ms with a handshake each).
- Each role writes ``/etc/sglang/deployed/<role>.json`` (role ``deploy_record``): deployed or
  skipped, and why. A check module marked ``pytest.mark.milestone("<role>")`` runs when the
  role deployed, is skipped with the role's reason when it skipped on purpose ("no GPU"), and
  fails loudly when there is no record: the milestone should have run and did not.
"""

from __future__ import annotations

import json
import os
import shlex
import sys
from pathlib import Path

import pytest

RECORD_DIR = os.environ.get("SGLANG_LXC_DEPLOYED_DIR", "/etc/sglang/deployed")
PLAYBOOK_OF = {
    "cuda_toolkit": "playbooks/toolchain.yml",
    "sglang": "playbooks/sglang.yml",
    "sglang_serve": "playbooks/serve.yml",
    "sglang_router": "playbooks/serve.yml",
    "gpu_facts": "playbooks/preflight.yml",
}
_VENV_BIN = Path(sys.executable).parent
if (_VENV_BIN / "ansible-inventory").exists():
    os.environ["PATH"] = os.pathsep.join([str(_VENV_BIN), os.environ.get("PATH", os.defpath)])
# testinfra passes ansible.cfg's control_path to ssh only when its folder exists (ansible makes
# it on its first SSH connection): one connection per host instead of a handshake per command
Path("~/.ansible/cp").expanduser().mkdir(mode=0o700, parents=True, exist_ok=True)

_READ_RECORDS = (
    "import glob, json, sys\n"
    "out = {}\n"
    "for path in glob.glob(sys.argv[1] + '/*.json'):\n"
    "    try:\n"
    "        data = json.load(open(path))\n"
    "    except (OSError, ValueError) as exc:\n"
    "        data = {'status': 'unreadable', 'reason': str(exc)}\n"
    "    out[path.rsplit('/', 1)[-1][:-5]] = data\n"
    "print(json.dumps(out))\n"
)
_records: dict[str, dict[str, dict]] = {}


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "milestone(role, unless_exists=None): run only where the role's deploy record says "
        "deployed; skip with its reason where it skipped; fail where there is no record "
        "(unless the path unless_exists is there: then check what is there)",
    )


def deploy_records(host) -> dict[str, dict]:
    """{role: record} from the host, read once per host and session."""
    key = str(host.backend.get_pytest_id())
    if key not in _records:
        out = host.check_output(
            f"python3 -c {shlex.quote(_READ_RECORDS)} {shlex.quote(RECORD_DIR)}")
        _records[key] = json.loads(out)
    return _records[key]


def _check(marker: pytest.Mark, host) -> None:
    role = marker.args[0]
    name = host.backend.get_pytest_id()
    record = deploy_records(host).get(role)
    unless = marker.kwargs.get("unless_exists")
    if unless and host.file(unless).exists:
        return  # something put it there: check it
    if record is None:
        pytest.fail(
            f"{name}: no {RECORD_DIR}/{role}.json: the {role} milestone has not run on this "
            f"host, or not since records were kept; run {PLAYBOOK_OF.get(role, 'site.yml')}",
            pytrace=False)
    status = record.get("status")
    if status == "skipped":
        pytest.skip(f"{role} skipped on purpose on {name}: {record.get('reason') or '?'}")
    if status != "deployed":
        pytest.fail(f"{name}: {RECORD_DIR}/{role}.json says {status!r}: {record.get('reason')}",
                    pytrace=False)


@pytest.fixture(scope="module", autouse=True)
def _milestone_of_module(request: pytest.FixtureRequest) -> None:
    """``pytestmark = pytest.mark.milestone(role)``: decided before the module's fixtures."""
    marker = request.node.get_closest_marker("milestone")
    if marker is not None:
        _check(marker, request.getfixturevalue("host"))


@pytest.fixture(autouse=True)
def _milestone_of_test(request: pytest.FixtureRequest) -> None:
    """``@pytest.mark.milestone(role)`` on one check."""
    for marker in request.node.own_markers:
        if marker.name == "milestone":
            _check(marker, request.getfixturevalue("host"))
