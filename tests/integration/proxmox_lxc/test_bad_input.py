"""Bad inventory input stops the run before any container changes, naming variable and host."""

from __future__ import annotations

import json
import re
import time
from pathlib import Path

import pytest

from tests.lablib import LAB_INVENTORY, ansible_playbook, fit_scenario, lab_root, pct

pytestmark = pytest.mark.lab


def ct(num: int, **kw) -> dict:
    return {"name": f"ct{num}", "vmid": num, "ip": f"10.0.3.{num % 256}/24",
            "gateway": "10.0.3.1", **kw}


def snapshot() -> dict[str, str]:
    """Configs of this suite's containers, 211-219 (ct210 is test_proxmox_lxc.py's, which may
    run beside it on another worker)."""
    confs = lab_root() / "etc/pve/lxc"
    return {p.name: p.read_text() for p in sorted(confs.glob("21[1-9].conf"))}


@pytest.mark.parametrize(
    ("containers", "extra", "message"),
    [
        ([ct(211, vmid=99)], {}, "proxmox_lxc_containers (node localhost)[ct211].vmid: must be "
                                 "an integer in 100..999999999, got 99"),
        ([ct(211), ct(212, vmid=211)], {}, "[ct212].vmid: 211 is also used by ct211"),
        ([ct(211), ct(212, ip="10.0.3.211/24")], {},
         "[ct212].ip: 10.0.3.211 is also used by ct211"),
        ([ct(211, memory=128)], {}, "[ct211].memory: 128 MiB is below the floor of 512 MiB"),
        ([ct(211)], {"proxmox_lxc_recreate": ["ct999"]},
         "proxmox_lxc_recreate: 'ct999' is not a container in the inventory"),
        ([ct(211, template="local:vztmpl/no-such-template.tar.zst")], {},
         "proxmox_lxc_containers[ct211].template = 'local:vztmpl/no-such-template.tar.zst': "
         f"{lab_root()}/var/lib/vz/template/cache/no-such-template.tar.zst not found on localhost"),
        ([ct(211, gpus=[9], gpu_required=True)], {},
         "proxmox_lxc_containers[ct211].gpus = [9]: GPU 9 not on localhost (it has: no GPU)"),
        ([ct(211, cores="many")], {}, "cores"),
    ],
    ids=["vmid-range", "dup-vmid", "dup-ip", "memory-floor", "recreate-unknown",
         "missing-template", "unknown-gpu", "wrong-type"],
)
def test_rejected_before_any_change(lab_node, containers, extra, message):
    before = snapshot()
    result = ansible_playbook(
        ["playbooks/validate.yml", "playbooks/containers.yml"], LAB_INVENTORY,
        extra_vars={"proxmox_lxc_containers": containers, **extra},
    )
    assert result.rc != 0, str(result)
    assert message in " ".join(result.output.split()), str(result)
    assert snapshot() == before
    assert not (lab_root() / "data/ct211").exists()


@pytest.fixture(scope="module")
def ct213(lab_container):
    """A real container on the lab node whose vmid, hostname and address others may not take."""
    return lab_container(213)


def test_vmid_held_by_another_container_is_refused(ct213):
    other = ct213
    before = snapshot()
    result = ansible_playbook(
        "playbooks/containers.yml", LAB_INVENTORY,
        extra_vars={"proxmox_lxc_containers": [ct(214, vmid=other.vmid)]},
    )
    assert result.rc != 0
    assert ("proxmox_lxc_containers[ct214].vmid: CT 213 on localhost is \"ct213\", not ct214"
            in " ".join(result.output.split())), str(result)
    assert snapshot() == before


def node_state(vmids) -> dict:
    """`pct list` lines and config files of the given containers and of this suite's range."""
    listing = {line.split()[0]: line.split()[1] for line in pct("list").stdout.splitlines()[1:]
               if line.split() and line.split()[0].isdigit()}
    confs = lab_root() / "etc/pve/lxc"
    wanted = {str(v) for v in vmids} | {p.stem for p in confs.glob("21[1-9].conf")}
    return {
        "list": {v: listing.get(v) for v in sorted(wanted)},
        "configs": {v: (confs / f"{v}.conf").read_text() if (confs / f"{v}.conf").exists()
                    else None for v in sorted(wanted)},
    }


# One site.yml run with many mistakes at once: every one is listed by the validate play, whose
# first line per problem names host, variable and value and ends with the fix; nothing changes.
MANY = {
    "proxmox_lxc_containers": [
        ct(211, vmid=213),                                  # vmid of the live ct213
        ct(212, hostname="ct213"),                          # hostname of the live ct213
        ct(214, ip="10.0.3.213/24"),                        # address of the live ct213
        ct(215, cores=0, memory="16G"),
        ct(216, ip="10.0.9.216/24", gateway="10.0.9.1"),    # outside lxcbr0's subnet
        ct(217, hostname="bad;name here", gpus=[0, 0],
           mounts={"host_path": "/srv/x", "path": "/srv/x"}),
        ct(218, cores=999, coress=2),
        ct(219, template="local:vztmpl/no-such-template.tar.zst"),
    ],
    "sglang_serve_instnaces": [{"name": "tp8", "gpus": [0, 1]}],
    "sglang_serve_enabled": True,
    "sglang_serve_gpu_count": 2,
    "sglang_serve_model_path": "../../etc",
}
EXPECTED = [
    'localhost: proxmox_lxc_containers[ct211].vmid = 213: CT 213 on localhost is already "ct213"',
    "localhost: proxmox_lxc_containers[ct212].hostname = 'ct213': CT 213 on localhost already "
    "has this hostname. Fix: choose another hostname",
    "localhost: proxmox_lxc_containers[ct214].ip = '10.0.3.213/24': 10.0.3.213 is already used by "
    "CT 213 (ct213) on localhost",
    "[ct215].cores: 0 must be at least 1; fix: give it 1 or more",
    "[ct215].memory: must be an integer number of MiB, got the string '16G'",
    "localhost: proxmox_lxc_containers[ct216].ip = '10.0.9.216/24': outside bridge lxcbr0's "
    "subnet 10.0.3.0/24. Fix: pick an address in 10.0.3.0/24, or set allow_ip_outside_bridge",
    "[ct217].hostname: 'bad;name here' is not a valid hostname (RFC 1123",
    "[ct217].gpus: GPU 0 is listed twice",
    "[ct217].mounts: must be a list of {host_path, path} mappings, got a mapping",
    "localhost: proxmox_lxc_containers[ct218].cores = 999: localhost has only",
    "localhost: proxmox_lxc_containers[ct218].coress = 2: unknown key. Fix: rename it "
    "(did you mean cores?)",
    "/var/lib/vz/template/cache/no-such-template.tar.zst not found on localhost. Fix: download it",
    "sglang_serve_instnaces: no role declares this variable. Fix: rename it (did you mean "
    "sglang_serve_instances?)",
    "ct200: sglang_serve_model_path = '../../etc' resolves to /etc, outside the model store",
]


def test_many_mistakes_listed_by_the_validate_play_with_nothing_changed(ct213):
    vmids = [213, *range(211, 220)]
    before = node_state(vmids)
    start = time.monotonic()
    result = ansible_playbook("site.yml", LAB_INVENTORY, extra_vars=MANY)
    elapsed = time.monotonic() - start
    print(f"site.yml rejected {len(EXPECTED)} mistakes in {elapsed:.1f} s")
    flat = " ".join(result.output.split())
    assert result.rc != 0, str(result)
    missing = [e for e in EXPECTED if e not in flat]
    assert not missing, f"{missing}\n{result}"
    # the validate play stopped the run: no later play started, nothing changed anywhere
    assert "PLAY [Provision LXC containers]" not in result.output
    assert "Task failed: Finalization" not in result.output
    assert "filter plugin" not in result.output
    assert result.stats and all(s["changed"] == 0 for s in result.stats.values()), str(result)
    assert node_state(vmids) == before
    assert not (lab_root() / "data/ct215").exists()


def test_lab_inventory_passes_validation(lab_node):
    result = ansible_playbook("playbooks/validate.yml", LAB_INVENTORY)
    assert result.rc == 0, str(result)
    assert result.changed == 0


def test_example_inventory_needs_only_its_node_and_a_key(tmp_path):
    """inventory/example on a controller without ~/.ssh/id_ed25519.pub: the validate play names
    the key and the command that makes it (before, the container play failed on a lookup).
    With a key, the only problem left is that kpro6 (192.0.2.10) is not reachable from here."""
    example = LAB_INVENTORY.parent / "example"
    result = ansible_playbook("playbooks/validate.yml", example, check=True,
                              env={"HOME": str(tmp_path)}, timeout=300)
    flat = " ".join(result.output.split())
    assert result.rc != 0, str(result)
    assert ("kpro6: proxmox_lxc_ssh_public_key: the controller cannot read the SSH public key "
            "to install") in flat, str(result)
    assert "Fix: make a key with `ssh-keygen -t ed25519 -f ~/.ssh/id_ed25519`" in flat
    assert "kpro6: ansible_host = '192.0.2.10': unreachable" in flat
    (tmp_path / ".ssh").mkdir()
    (tmp_path / ".ssh/id_ed25519.pub").write_text("ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAI test\n")
    result = ansible_playbook("playbooks/validate.yml", example, check=True,
                              env={"HOME": str(tmp_path)}, timeout=300)
    assert "(1 problem(s); nothing was changed)" in result.output, str(result)
    assert "kpro6: ansible_host = '192.0.2.10': unreachable" in " ".join(result.output.split())


# A serving container of the lab node (vmid 286, never created: the run must stop before) whose
# model store holds a sparse 600 GiB safetensors file; its node answers NVML with the GPU
# stand-in's recording of 8x RTX PRO 6000 (the lab has no GPU), its eight one-GPU instances
# can use 90.3 GB each.
FIT_MESSAGE = (
    "ct286: sglang_serve_gpus = [0, 1, 2, 3, 4, 5, 6, 7]: each of the 8 instances gpu0..gpu7 "
    "(1 GPU(s) each, tp 1) cannot hold its weights: "
    "644 GB (model big-model 644 GB), more than the 90.3 GB it may use (1 x 102.6 GB x "
    "mem_fraction_static 0.88). Fix: one instance with gpus [0..7], tp 8: 723 GB"
)


def fit_env(tmp_path: Path, env: dict[str, str]) -> dict[str, str]:
    return {**env, "SGLANG_LXC_ARTIFACTS": str(tmp_path / "artifacts")}


def test_a_model_that_cannot_fit_stops_site_yml_in_the_validate_play(lab_node, tmp_path):
    inventory, store, env = fit_scenario(tmp_path, weights_bytes=600 * 2**30)
    weights = store / "big-model/model-00001-of-00001.safetensors"
    before = node_state([286])
    start = time.monotonic()
    result = ansible_playbook("site.yml", LAB_INVENTORY, args=["-i", str(inventory)],
                              env=fit_env(tmp_path, env))
    elapsed = time.monotonic() - start
    flat = " ".join(result.output.split())
    took = re.search(r"elapsed_s: ([0-9.]+)", result.output)
    print(f"site.yml stopped by the fit check in {elapsed:.1f} s "
          f"(the check itself: {took.group(1) if took else '?'} s)")
    assert result.rc != 0, str(result)
    assert FIT_MESSAGE in flat, str(result)
    assert "PLAY [Provision LXC containers]" not in result.output
    assert result.stats and all(s["changed"] == 0 for s in result.stats.values()), str(result)
    assert node_state([286]) == before
    assert not (lab_root() / "data/ct286").exists()
    assert [(p.name, p.stat().st_size) for p in sorted(store.rglob("*"))] == [
        ("big-model", 4096), ("config.json", 2), (weights.name, 600 * 2**30)]


def test_a_model_not_in_the_store_yet_is_noted_in_the_checklist(lab_node, tmp_path):
    inventory, store, env = fit_scenario(tmp_path)
    (store / "big-model").rmdir()
    result = ansible_playbook("playbooks/validate.yml", LAB_INVENTORY,
                              args=["-i", str(inventory)], env=fit_env(tmp_path, env))
    assert result.rc == 0, str(result)
    todo = json.loads((tmp_path / "artifacts/latest/todo.json").read_text())
    details = [i["details"] for i in todo["todos"] if i["play"].startswith("Validate the inv")]
    # one line for the play, its notes joined; ct200 (inventory/lab's serving container) is noted
    # too, since this second inventory source holds no spec of it
    assert len(details) == 1, todo
    assert "ct286: big-model: model not in the store yet: fit not checked" in details[0].split("; ")
