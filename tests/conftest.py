"""Shared fixtures. Lab fixtures create real LXC containers through the proxmox_lxc role."""

from __future__ import annotations

import contextlib
import fcntl
import os
import subprocess
from pathlib import Path

import pytest

from tests.lablib import (
    LAB_INVENTORY,
    GoldenTemplate,
    LabContainer,
    ansible_playbook,
    lab_root,
    missing_for_lab,
    node_cache_mounts,
    write_inventory,
)


def _bridge_exists(name: str = "lxcbr0") -> bool:
    return subprocess.run(["ip", "link", "show", "dev", name], capture_output=True).returncode == 0


# pytest-xdist workers each have their own session: the lab node is prepared under a lock, and
# the workers using it are counted, so the last one out removes a bridge the tests created.
USERS = Path("/run/sglang-lxc-lab-test-users")


@contextlib.contextmanager
def _locked_users():
    with open(f"{USERS}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        lines = USERS.read_text().split() if USERS.exists() else []
        # a worker killed without teardown leaves its pid: forget pids that are gone
        users = [pid for pid in lines[1:] if Path(f"/proc/{pid}").exists()]
        created = bool(lines and lines[0] == "created" and users)
        state = {"created": created, "users": users}
        yield state
        if state["users"]:
            USERS.write_text(" ".join(["created" if state["created"] else "found",
                                        *state["users"]]))
        else:
            USERS.unlink(missing_ok=True)


@pytest.fixture(scope="session")
def lab_node():
    """This machine prepared as the lab's Proxmox node (bridge, template, key).

    A bridge the tests had to create is deleted when the last session using it ends.
    """
    reason = missing_for_lab()
    if reason:
        pytest.skip(reason)
    me = str(os.getpid())
    with _locked_users() as state:
        if not state["users"]:
            state["created"] = not _bridge_exists()
        result = ansible_playbook("playbooks/lab_node.yml", LAB_INVENTORY)
        assert result.rc == 0, str(result)
        state["users"].append(me)
    yield lab_root()
    with _locked_users() as state:
        state["users"] = [pid for pid in state["users"] if pid != me]
        if not state["users"] and state["created"]:
            leftover = list((lab_root() / "etc/pve/lxc").glob("*.conf"))
            if not leftover:
                subprocess.run(["ip", "link", "delete", "lxcbr0"], check=False)


@pytest.fixture(scope="module")
def lab_container(lab_node, tmp_path_factory):
    """Factory: ``lab_container(vmid, **spec)`` -> a running LabContainer at 10.0.3.<vmid>.

    Every container made through it is destroyed when the test module ends.
    """
    made: list[LabContainer] = []

    def make(vmid: int, provision: bool = True, **spec) -> LabContainer:
        name = f"ct{vmid}"
        full = {
            "name": name,
            "vmid": vmid,
            "ip": f"10.0.3.{vmid}/24",
            "gateway": "10.0.3.1",
            "mounts": [
                {"host_path": str(lab_node / "data" / name / "models"), "path": "/srv/models"},
            ],
            **spec,
        }
        ct = LabContainer(vmid, tmp_path_factory.mktemp(name), full)
        made.append(ct)
        ct.destroy()  # a container left over by an interrupted run
        write_inventory(ct)
        if provision:
            result = ct.provision()
            assert result.rc == 0, str(result)
        return ct

    yield make
    for ct in made:
        ct.destroy()


# The suite's golden template: vmid 260 (10.0.3.160), docs/CONVENTIONS.md.
GOLDEN_VMID = 260


@pytest.fixture(scope="session")
def golden_template(lab_node, tmp_path_factory):
    """vmid of the suite's golden template: a container converged through the real roles
    (toolchain + stack, the lab's inventory) and made a template, once for all xdist workers
    (tests/lablib.py GoldenTemplate: file lock, marker, the last worker destroys it)."""
    golden = GoldenTemplate(GOLDEN_VMID)
    yield golden.ensure(tmp_path_factory.mktemp("golden"))
    golden.release()


@pytest.fixture(scope="module")
def lab_clone(golden_template, lab_container):
    """Factory: ``lab_clone(vmid, **spec)`` -> a running LabContainer cloned (linked) from the
    golden template, with the toolchain and the stack already in place; destroyed with the
    module like lab_container's. The clone keeps the golden's node-cache mounts (the lab's venvs
    are links into uv's cache) beside its own ``mounts`` (default: its model store)."""

    def make(vmid: int, **spec) -> LabContainer:
        mounts = spec.pop("mounts", [
            {"host_path": str(lab_root() / "data" / f"ct{vmid}" / "models"),
             "path": "/srv/models"}])
        return lab_container(vmid, clone_from=golden_template,
                             mounts=[*mounts, *node_cache_mounts()], **spec)

    return make


# The order in which pytest-xdist's --dist loadfile hands files to the workers (pyproject's
# addopts turn off its own reordering, which sorts files by their number of tests and so put the
# serving file far down). A worker takes the next file in this order whenever two or fewer of
# its tests are left. The real-engine serving file (about 830 s of SGLang instance starts in one
# container, CI 2026-12-04) bounds the run's wall time, so it starts at once; the other lab
# files follow longest first (seconds in that run), then the lock's resolution (the longest
# unit file: last, it ran alone for its 41 s at the end of CI on 38b6e36, 2026-12-08), then the
# rest in collection order, many short files that even out the workers' ends.
FILE_ORDER = (
    "tests/integration/serve/",                           # 830 s
    "tests/integration/faults/",                          # 343 s
    "tests/integration/cuda/",                            # 285 s
    "tests/integration/sglang/test_kernel_build_lab.py",  # 271 s
    "tests/integration/gpu/",                             # 187 s
    "tests/integration/jit/",                             # 176 s
    "tests/integration/proxmox_lxc/test_clone.py",        # 149 s
    "tests/unit/sglang/test_lock_stack.py",               # 64 s
    "tests/integration/",                                 # 10-80 s each
)


def _file_rank(nodeid: str) -> int:
    return next((i for i, prefix in enumerate(FILE_ORDER) if nodeid.startswith(prefix)),
                len(FILE_ORDER))


def pytest_collection_modifyitems(config, items):
    items.sort(key=lambda item: _file_rank(item.nodeid))  # stable: a file's tests stay in order
