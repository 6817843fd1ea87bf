"""The collection as a user gets it: built with ansible-galaxy, installed into an empty
collections path, and called by FQCN from a project folder outside the repository.

One lab container (vmid 280, 10.0.3.180): ``ansible-playbook sglang_lxc.serving.site`` with the
lab's inventory (its group_vars, this container as the node's only container) provisions it
through every milestone, with the checklist callback enabled by FQCN in the project's
ansible.cfg; then a user playbook that calls the roles by FQCN converges it again and a rerun
changes nothing. The SGLang stack itself is left out here (``sglang_stack_enabled: false``): its
install is proven by tests/integration/jit and faults; this suite proves the packaging.
"""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.lablib import (
    _RECAP,
    LAB_INVENTORY,
    PCT,
    REPO,
    VENV_BIN,
    LabContainer,
    PlaybookResult,
    lab_root,
    node_cache_mounts,
)

pytestmark = pytest.mark.lab

VMID = 280
NAME = f"ct{VMID}"
ADDRESS = f"10.0.3.{VMID - 100}"
COLLECTION = "sglang_lxc.serving"
USER_PLAYBOOK = """\
---
- name: My Proxmox node
  hosts: proxmox_nodes
  gather_facts: false
  roles:
    - role: sglang_lxc.serving.proxmox_lxc

- name: My serving containers
  hosts: sglang_servers
  gather_facts: false
  roles:
    - role: sglang_lxc.serving.cuda_toolkit
    - role: sglang_lxc.serving.sglang
      vars:
        sglang_venv: "{{ sglang_lxc_venv }}"
        sglang_wheelhouse_dir: "{{ sglang_lxc_wheelhouse }}"
        sglang_cuda_env_file: "{{ sglang_lxc_cuda_env_file }}"
    - role: sglang_lxc.serving.sglang_serve
      vars:
        sglang_serve_venv: "{{ sglang_lxc_venv }}"
        sglang_serve_cuda_env_file: "{{ sglang_lxc_cuda_env_file }}"
"""


@pytest.fixture(scope="module")
def collections(tmp_path_factory) -> Path:
    """The tarball from ``ansible-galaxy collection build``, installed into an empty path."""
    where = tmp_path_factory.mktemp("galaxy")
    env = user_env(where)
    subprocess.run([str(VENV_BIN / "ansible-galaxy"), "collection", "build", "--output-path",
                    str(where), str(REPO)], cwd=where, env=env, check=True,
                   capture_output=True)
    tarball = next(where.glob("sglang_lxc-serving-*.tar.gz"))
    path = where / "collections"
    subprocess.run([str(VENV_BIN / "ansible-galaxy"), "collection", "install", "-p", str(path),
                    str(tarball)], cwd=where, env=env, check=True, capture_output=True)
    return path


@pytest.fixture(scope="module")
def project(tmp_path_factory, collections) -> Path:
    """A user's project folder, outside the repository: ansible.cfg, inventory, playbook."""
    where = tmp_path_factory.mktemp("project")
    assert REPO not in where.parents
    (where / "ansible.cfg").write_text(
        "[defaults]\n"
        f"collections_path = {collections}\n"
        f"callbacks_enabled = {COLLECTION}.todo\n"
        "interpreter_python = auto_silent\n"
        "[callback_todo]\n"
        "artifacts_dir = artifacts\n"
    )
    inventory = where / "inventory"
    inventory.mkdir()
    # the lab inventory's variables, with this container as the node's only one
    (inventory / "group_vars").symlink_to(LAB_INVENTORY / "group_vars")
    spec = {
        "name": NAME, "vmid": VMID, "ip": f"{ADDRESS}/24", "gateway": "10.0.3.1",
        "mounts": [{"host_path": str(lab_root() / "data" / NAME / "models"),
                    "path": "/srv/models"}, *node_cache_mounts()],
    }
    (inventory / "hosts.yml").write_text(yaml.safe_dump({"all": {"children": {
        "proxmox_nodes": {"hosts": {"localhost": {
            "ansible_connection": "local",
            "ansible_python_interpreter": str(VENV_BIN / "python"),
            "proxmox_lxc_pct": str(PCT),
            "proxmox_lxc_containers": [spec],
        }}},
        "sglang_servers": {"hosts": {NAME: {"ansible_host": ADDRESS}}},
    }}}))
    (where / "serve.yml").write_text(USER_PLAYBOOK)
    return where


@pytest.fixture(scope="module")
def container(lab_node, project):
    ct = LabContainer(VMID, project, {})
    ct.destroy()  # left over by an interrupted run
    yield ct
    ct.destroy()


def collections_of(project: Path) -> Path:
    cfg = (project / "ansible.cfg").read_text()
    return Path(cfg.split("collections_path = ", 1)[1].splitlines()[0]) / "ansible_collections"


def user_env(where: Path) -> dict[str, str]:
    """A user's shell: no ANSIBLE_* of the test session, the repository nowhere on a path."""
    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("ANSIBLE_", "PYTHONPATH", "SGLANG_LXC_"))}
    env.update(PATH=os.pathsep.join([str(VENV_BIN), env.get("PATH", os.defpath)]),
               ANSIBLE_NOCOLOR="1", HOME=os.environ.get("HOME", "/root"))
    return env


def play(project: Path, playbook: str, *args: str) -> PlaybookResult:
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "inventory", playbook,
         "-e", json.dumps({"sglang_stack_enabled": False}), *args],
        cwd=project, env=user_env(project), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
        text=True, timeout=1800, check=False,
    )
    stats = {m["host"]: {k: int(v) for k, v in m.groupdict().items() if k != "host"}
             for m in _RECAP.finditer(proc.stdout)}
    return PlaybookResult(proc.returncode, proc.stdout, stats)


def test_the_tarball_holds_the_collection_and_not_the_development_tree(collections):
    root = collections / "ansible_collections" / "sglang_lxc" / "serving"
    manifest = json.loads((root / "MANIFEST.json").read_text())["collection_info"]
    assert (manifest["namespace"], manifest["name"]) == ("sglang_lxc", "serving")
    for shipped in ("playbooks/site.yml", "roles/sglang_serve/tasks/main.yml",
                    "plugins/callback/todo.py", "plugins/plugin_utils/validate_common.py",
                    "runner/checklist.py", "meta/runtime.yml"):
        assert (root / shipped).is_file(), shipped
    for kept_home in ("tests/unit", "tests/integration", "benchmarks", ".venv", ".collections",
                      "inventory/lab", "ansible.cfg"):
        assert not (root / kept_home).exists(), kept_home


def test_site_by_fqcn_from_outside_the_checkout(project, container):
    result = play(project, f"{COLLECTION}.site")
    assert result.rc == 0, str(result)
    assert result.stats[NAME]["failed"] == 0 and result.stats[NAME]["changed"] > 0
    # the only copy of the collection this project sees is the installed one
    listed = subprocess.run([str(VENV_BIN / "ansible-galaxy"), "collection", "list", COLLECTION,
                             "--format", "json"], cwd=project, env=user_env(project),
                            capture_output=True, text=True, check=True).stdout
    assert list(json.loads(listed)) == [str(collections_of(project))]
    # the checklist callback, enabled by FQCN in the project's ansible.cfg
    todo = json.loads((project / "artifacts" / "latest" / "todo.json").read_text())
    statuses = {t["content"]: t["status"] for t in todo["todos"]}
    assert statuses[f"Install CUDA 13.0 toolchain and fix SM120 JIT paths on {NAME}"] == (
        "completed")
    assert todo["run"]["exit_code"] == 0
    assert [t["content"] for t in todo["todos"]].count("Validate the inventory") == 1


def test_roles_by_fqcn_in_a_user_playbook_converge_then_change_nothing(project, container):
    first = play(project, "serve.yml")
    assert first.rc == 0, str(first)
    again = play(project, "serve.yml")
    assert again.rc == 0, str(again)
    assert again.changed == 0, str(again)
    check = play(project, "serve.yml", "--check")
    assert check.rc == 0 and check.changed == 0, str(check)
