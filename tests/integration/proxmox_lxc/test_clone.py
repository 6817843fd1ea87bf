"""Templates and clones on the lab node: `pct template`, linked and full `pct clone` (the pct
stand-in over LXC's snapshot copies), reprovisioning by clone, and what validation refuses.

vmids 264-267 (addresses 10.0.3.164-167): 264 is made a template, 265 a linked clone of it,
266 a full clone, 267 a clone only planned in check mode. The suite's golden template takes
260-263 (tests/golden.py).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from tests.lablib import (
    LAB_INVENTORY,
    REPO,
    GoldenTemplate,
    LabContainer,
    ansible_playbook,
    lab_root,
    pct,
    write_inventory,
)

pytestmark = pytest.mark.lab

TEMPLATE, LINKED, FULL, PLANNED = 264, 265, 266, 267
LXC_PATH = Path(os.environ.get("PCT_STANDIN_LXC_PATH", "/var/lib/lxc"))


def address(vmid: int) -> str:
    return f"10.0.3.{vmid - 100}"


def conf(vmid: int) -> str:
    return (lab_root() / "etc/pve/lxc" / f"{vmid}.conf").read_text()


def clone_spec(vmid: int, **kw) -> dict:
    name = f"ct{vmid}"
    return {"name": name, "vmid": vmid, "ip": f"{address(vmid)}/24", "gateway": "10.0.3.1",
            "cores": 1, "memory": 1024, "clone_from": TEMPLATE,
            "mounts": [{"host_path": str(lab_root() / "data" / name / "models"),
                        "path": "/srv/models"}], **kw}


@pytest.fixture(scope="module")
def template(lab_node, lab_container, tmp_path_factory):
    for vmid in (PLANNED, FULL, LINKED):  # clones left over by a killed run go first
        LabContainer(vmid, tmp_path_factory.mktemp(f"left{vmid}"), clone_spec(vmid)).destroy()
    src = lab_container(TEMPLATE, cores=1, memory=1024, ip=f"{address(TEMPLATE)}/24")
    src.exec("sh", "-c", "echo converged > /root/golden")
    result = ansible_playbook("playbooks/template.yml", LAB_INVENTORY,
                              extra_vars={"proxmox_lxc_template_vmid": TEMPLATE})
    assert result.rc == 0, str(result)
    return result


def make_clone(tmp_path_factory, vmid: int, **kw) -> LabContainer:
    ct = LabContainer(vmid, tmp_path_factory.mktemp(f"ct{vmid}"), clone_spec(vmid, **kw))
    write_inventory(ct)
    return ct


@pytest.fixture(scope="module")
def linked(template, tmp_path_factory):
    ct = make_clone(tmp_path_factory, LINKED)
    result = ct.provision()
    yield ct, result
    ct.destroy()


@pytest.fixture(scope="module")
def full(template, tmp_path_factory):
    ct = make_clone(tmp_path_factory, FULL, clone_full=True)
    result = ct.provision()
    yield ct, result
    ct.destroy()


def test_a_template_is_stopped_cannot_start_and_keeps_no_identity(template):
    text = conf(TEMPLATE)
    assert "template: 1" in text
    assert f"rootfs: local:base-{TEMPLATE}-disk-0" in text
    assert pct("status", str(TEMPLATE)).stdout.strip() == "status: stopped"
    started = pct("start", str(TEMPLATE), check=False)
    assert started.returncode != 0 and "template" in started.stderr
    rootfs = LXC_PATH / str(TEMPLATE) / "rootfs"
    assert not list((rootfs / "etc/ssh").glob("ssh_host_*"))
    assert (rootfs / "etc/machine-id").read_text() == ""
    again = ansible_playbook("playbooks/template.yml", LAB_INVENTORY,
                             extra_vars={"proxmox_lxc_template_vmid": TEMPLATE})
    assert again.rc == 0 and again.changed == 0, str(again)


def test_a_linked_clone_shares_the_templates_disk_and_gets_its_own_identity(linked):
    ct, result = linked
    assert result.rc == 0, str(result)
    text = conf(LINKED)
    assert f"rootfs: local:base-{TEMPLATE}-disk-0/vm-{LINKED}-disk-0" in text
    assert f"hostname: ct{LINKED}" in text and f"ip={address(LINKED)}/24" in text
    lxc_conf = (LXC_PATH / str(LINKED) / "config").read_text()
    assert f"lxc.rootfs.path = overlay:{LXC_PATH}/{TEMPLATE}/rootfs:" in lxc_conf
    inside = ct.exec("sh", "-c", "cat /root/golden; hostname; hostname -I; "
                     "ls /etc/ssh/ssh_host_ed25519_key; cat /etc/machine-id").stdout.split()
    assert inside[:4] == ["converged", f"ct{LINKED}", address(LINKED),
                          "/etc/ssh/ssh_host_ed25519_key"]
    assert len(inside[4]) == 32  # a machine-id of its own
    # converged only what differs, and the checklist says so
    flat = " ".join(result.output.split())
    assert f"ct{LINKED} ({LINKED}): clone" in flat
    create = result.output.split("Proxmox LXC | Create | ", 1)[1].split("TASK [", 1)[0]
    assert "skipping: [localhost]" in create and "changed:" not in create
    proc = ct.testinfra("tests/infra/test_proxmox_lxc.py")  # over SSH, as the roles reach it
    assert proc.returncode == 0, proc.stdout + proc.stderr
    # checked, not skipped (a module whose deploy record says "skipped" exits 0 too)
    assert " passed" in proc.stdout and "failed" not in proc.stdout, proc.stdout


def test_the_checklist_says_what_a_clone_converged(template, tmp_path_factory):
    ct = make_clone(tmp_path_factory, PLANNED, memory=1536)
    artifacts = tmp_path_factory.mktemp("artifacts")
    try:
        result = ansible_playbook("playbooks/containers.yml", LAB_INVENTORY,
                                  extra_vars={"proxmox_lxc_containers": [ct.spec]},
                                  env={"SGLANG_LXC_ARTIFACTS": str(artifacts)})
        assert result.rc == 0, str(result)
        todo = (artifacts / "latest" / "todo.json").read_text()
        assert (f"ct{PLANNED} cloned from template CT {TEMPLATE} (linked); converged only "
                "what differs: memory, net0, mp0") in todo
    finally:
        ct.destroy()


def test_a_second_run_changes_nothing(linked):
    ct, _ = linked
    result = ct.provision()
    assert result.rc == 0 and result.changed == 0, str(result)


def test_reprovisioning_by_clone_keeps_the_bind_mounted_data(linked):
    ct, _ = linked
    ct.exec("sh", "-c", "echo weights > /srv/models/kept && echo scratch > /root/scratch")
    result = ct.provision(extra_vars={"proxmox_lxc_recreate": [ct.name]})
    assert result.rc == 0, str(result)
    assert "Destroy the container, keeping its bind-mounted data" in result.output
    assert ct.exec("cat", "/srv/models/kept").stdout == "weights\n"
    assert ct.exec("test", "-e", "/root/scratch", check=False).returncode == 1  # a fresh clone
    assert ct.exec("cat", "/root/golden").stdout == "converged\n"
    assert f"vm-{LINKED}-disk-0" in conf(LINKED)


def test_a_full_clone_copies_the_disk(full):
    ct, result = full
    assert result.rc == 0, str(result)
    assert f"rootfs: local:{FULL}/rootfs" in conf(FULL)
    assert (LXC_PATH / str(FULL) / "rootfs/root/golden").read_text() == "converged\n"
    assert ct.exec("hostname").stdout.strip() == f"ct{FULL}"


def test_a_template_with_linked_clones_is_not_destroyed(linked):
    proc = pct("destroy", str(TEMPLATE), check=False)
    assert proc.returncode != 0 and "still in use by linked clones" in proc.stderr
    assert "template: 1" in conf(TEMPLATE)


def test_check_mode_plans_a_clone_and_changes_nothing(template, tmp_path_factory):
    ct = make_clone(tmp_path_factory, PLANNED)
    result = ct.provision(check=True)
    assert result.rc == 0, str(result)  # it reports the mount folder it would make
    assert f"would be cloned from template CT {TEMPLATE}" in " ".join(result.output.split())
    assert not (lab_root() / "etc/pve/lxc" / f"{PLANNED}.conf").exists()
    assert not (lab_root() / "data" / f"ct{PLANNED}").exists()


def test_clone_from_a_container_that_is_not_a_template_fails_before_any_change(
        linked, tmp_path_factory):
    ct = make_clone(tmp_path_factory, PLANNED, clone_from=LINKED)
    result = ct.provision()
    assert result.rc != 0
    assert (f"proxmox_lxc_containers[ct{PLANNED}].clone_from: CT {LINKED} on localhost is not "
            "a template") in " ".join(result.output.split())
    assert not (lab_root() / "etc/pve/lxc" / f"{PLANNED}.conf").exists()


GOLDEN_SPEC = {"cores": 1, "memory": 1024}
# A second worker, a process of its own: it takes the golden template (vmid 262), says so, and
# gives it back when told to ("release" on stdin).
SECOND_USER = textwrap.dedent(
    f"""
    import sys
    from pathlib import Path
    from tests.lablib import GoldenTemplate
    golden = GoldenTemplate(262, playbooks=(), spec={GOLDEN_SPEC!r})
    print("ENSURED", golden.ensure(Path(sys.argv[1])), flush=True)
    if sys.stdin.readline().strip() == "release":
        golden.release()
        print("RELEASED", flush=True)
    """
)


def golden_users(golden: GoldenTemplate) -> list[int]:
    return json.loads(golden.marker.read_text())["users"]


def test_a_golden_template_is_made_once_and_destroyed_by_its_last_user(lab_node, tmp_path):
    """The suite's golden-template mechanism (tests/conftest.py golden_template), with a
    container converged by proxmox_lxc only (vmid 262, clone 263) to keep this test short: two
    users (this process and a second one), the first to leave keeps it, the last destroys it."""
    golden = GoldenTemplate(262, playbooks=(), spec=GOLDEN_SPEC)
    golden.marker.write_text('{"key": "a killed run", "users": []}')  # a leftover's marker
    vmid = golden.ensure(tmp_path / "a")
    made = (lab_root() / "etc/pve/lxc/262.conf").stat().st_mtime_ns
    assert "template: 1" in conf(vmid)
    second = subprocess.Popen([sys.executable, "-c", SECOND_USER, str(tmp_path / "b")],
                              cwd=REPO, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert second.stdout.readline().split() == ["ENSURED", str(vmid)]
        # the second worker found it, it did not make it again
        assert (lab_root() / "etc/pve/lxc/262.conf").stat().st_mtime_ns == made
        assert golden_users(golden) == [os.getpid(), second.pid]
        clone = make_clone_of(tmp_path, 263, vmid)
        assert clone.provision().rc == 0
        golden.release()  # the first user leaves: the second still uses it, it stays
        assert golden_users(golden) == [second.pid]
        assert "template: 1" in conf(262)
        assert (lab_root() / "etc/pve/lxc/263.conf").exists()
        second.stdin.write("release\n")
        second.stdin.flush()
        assert second.stdout.readline().split() == ["RELEASED"]  # the last user
    finally:
        second.stdin.close()
        second.wait(timeout=300)
        if golden.marker.exists():  # a failure above: no template left behind
            golden.release()
    assert second.returncode == 0
    # the last user out destroyed them: the clone first, then the template
    assert not (lab_root() / "etc/pve/lxc/263.conf").exists()
    assert not (lab_root() / "etc/pve/lxc/262.conf").exists()
    assert not golden.marker.exists()


def make_clone_of(tmp_path, vmid: int, source: int) -> LabContainer:
    ct = LabContainer(vmid, tmp_path / f"ct{vmid}", clone_spec(vmid, clone_from=source))
    write_inventory(ct)
    return ct
