"""Unit tests of plugins/action/proxmox_lxc_probe.py: the node read and the drift per concern."""

from __future__ import annotations

import subprocess
from pathlib import Path

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import lxc_gpu_passthrough as gpu
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import lxc_spec
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import pct_config as pct

from tests.loaders import load_file

HERE = Path(__file__).parent
ROOT = HERE.parents[2]
probe = load_file("proxmox_lxc_probe_action", ROOT / "plugins/action/proxmox_lxc_probe.py")

PROC = (HERE / "data/proc_devices_8gpu.txt").read_text()
DEV = (HERE / "data/dev_nvidia_8gpu.txt").read_text().split()
KEY = "ssh-ed25519 AAAAC3Nza sglang-lxc-lab"
TEMPLATE = "debian-12-standard_12.12-1_amd64.tar.zst"


def spec(**kw):
    base = {"name": "ct200", "vmid": 200, "hostname": "ct200", "cores": 8, "memory": 65536,
            "swap": 0, "bridge": "vmbr0", "ip": "10.10.0.200/24", "gateway": "10.10.0.1",
            "onboot": True, "unprivileged": True, "features": {"nesting": True},
            "rootfs_storage": "local-lvm", "rootfs_size": 64, "gpus": "none",
            "gpu_required": False, "template": f"local:vztmpl/{TEMPLATE}",
            "mounts": [{"host_path": "/tank/models", "path": "/srv/models"}],
            "groups": ["sglang_servers"], "host_vars": {}}
    base.update(kw)
    return base


def config_text(ct, extra_lines=()):
    """The config pct writes for a spec: its create options, as `pct config` prints them."""
    opts = pct.pct_options(ct)
    opts["net0"] += ",hwaddr=BC:24:11:00:00:01,type=veth"
    lines = [f"{k}: {v}" for k, v in sorted(opts.items())]
    return "\n".join([*lines, "ostype: debian", *extra_lines])


INSIDE_OK = "python3\nsshd\nsshd-active\nkey\nsystem running\naddr 10.10.0.200 \nexec ok"


def node_text(ct, inside=INSIDE_OK, config=None, mounts="/tank/models\t755 root",
              devices="", nodes="", templates=TEMPLATE):
    parts = [f"## devices\n{devices}", f"## nodes\n{nodes}", f"## templates\n{templates}",
             f"## paths\n{mounts}"]
    if config is not False:
        parts.append(f"## config {ct['vmid']}\n{config if config else config_text(ct)}")
        parts.append(f"## inside {ct['vmid']}\n{inside}")
    return "\n".join(parts) + "\n"


def plan(ct, text, recreate=(), key=KEY, bootstrap=True):
    sections = probe.parse_sections(text)
    node = probe.node_facts(sections)
    return probe.plan_container(ct, sections, node, "kpro6", "/var/lib/vz/template/cache",
                                list(recreate), key, bootstrap)


def test_a_container_as_specified_has_no_drift():
    ct = spec()
    got = plan(ct, node_text(ct))
    assert got["drift"] == [] and got["problems"] == []
    assert got["exists"] and got["status"] == "running" and got["address"] == "10.10.0.200"


def test_a_changed_option_drifts_config_with_the_pct_set_arguments():
    ct = spec()
    got = plan({**ct, "memory": 32768}, node_text(ct))
    assert got["drift"] == ["config"]
    assert got["set_args"] == ["--memory", "32768"]


def test_a_missing_container_is_created_and_its_template_must_exist():
    ct = spec()
    got = plan(ct, node_text(ct, config=False))
    assert got["drift"] == ["create"] and got["problems"] == []
    got = plan(ct, node_text(ct, config=False, templates="other.tar.zst"))
    assert got["problems"] == [
        f"proxmox_lxc_containers[ct200].template: local:vztmpl/{TEMPLATE} not found on kpro6 "
        f"(/var/lib/vz/template/cache/{TEMPLATE}); download it with `pveam download local "
        f"{TEMPLATE}` (lab: `sglang-lxc lab up`)"]


def test_a_vmid_held_by_another_hostname_is_refused_unless_recreated():
    ct = spec()
    text = node_text(ct, config=config_text({**ct, "hostname": "trainer"}))
    got = plan(ct, text)
    assert got["problems"] == [
        'proxmox_lxc_containers[ct200].vmid: CT 200 on kpro6 is "trainer", not ct200; pick '
        "another vmid, or list ct200 in proxmox_lxc_recreate"]
    got = plan(ct, text, recreate=["ct200"])
    assert got["problems"] == [] and got["drift"][0] == "recreate"


def test_gpus_asked_for_must_exist_and_gpu_required_needs_gpus():
    ct = spec(gpus=[0, 9], gpu_required=True)
    got = plan(ct, node_text(ct, devices=PROC, nodes="\n".join(DEV)))
    assert got["problems"] == [
        "proxmox_lxc_containers[ct200].gpus: GPU 9 not on kpro6 (it has: 0, 1, 2, 3, 4, 5, 6, 7)"]
    got = plan(spec(gpu_required=True), node_text(ct))
    assert got["problems"] == [
        "proxmox_lxc_containers[ct200].gpu_required: kpro6 has no NVIDIA GPU (no /dev/nvidia<N>); "
        "load the driver on the node or set gpu_required: false"]


def test_passthrough_lines_missing_or_stale_drift_passthrough():
    ct = spec(gpus=[0, 1])
    want = gpu.nvidia_passthrough(PROC, DEV, [0, 1])
    devices, nodes = PROC, "\n".join(DEV)
    assert plan(ct, node_text(ct, devices=devices, nodes=nodes))["drift"] == ["passthrough"]
    done = config_text(ct, want)
    assert plan(ct, node_text(ct, config=done, devices=devices, nodes=nodes))["drift"] == []
    # GPU 2 was passed through before and no longer is: its line must go
    stale = config_text(ct, [*want, "lxc.mount.entry: /dev/nvidia2 dev/nvidia2 none "
                                    "bind,optional,create=file"])
    assert plan(ct, node_text(ct, config=stale, devices=devices, nodes=nodes))["drift"] == [
        "passthrough"]


def test_a_stopped_container_drifts_start_and_one_still_booting_drifts_boot():
    ct = spec()
    assert plan(ct, node_text(ct, inside="status: stopped"))["drift"] == ["start"]
    booting = INSIDE_OK.replace("system running", "system starting")
    assert plan(ct, node_text(ct, inside=booting))["drift"] == ["boot"]
    degraded = INSIDE_OK.replace("system running", "system degraded")
    assert plan(ct, node_text(ct, inside=degraded))["drift"] == []


def test_missing_python_sshd_or_key_drifts_bootstrap_unless_bootstrap_is_off():
    ct = spec()
    for answer in ("python3", "sshd-active", "key"):
        inside = "\n".join(x for x in INSIDE_OK.splitlines() if x != answer)
        assert plan(ct, node_text(ct, inside=inside))["drift"] == ["bootstrap"], answer
        assert plan(ct, node_text(ct, inside=inside), bootstrap=False)["drift"] == []
    no_key = "\n".join(x for x in INSIDE_OK.splitlines() if x != "key")
    assert plan(ct, node_text(ct, inside=no_key), key="")["drift"] == []


def test_mount_dirs_missing_or_with_another_owner_drift_mounts_another_mode_does_not():
    ct = spec()
    assert plan(ct, node_text(ct, mounts=""))["drift"] == ["mounts"]
    assert plan(ct, node_text(ct, mounts="/tank/models\t700 root"))["drift"] == []
    owned = spec(mounts=[{"host_path": "/tank/models", "path": "/srv/models", "owner": "ai"}])
    assert plan(owned, node_text(owned))["drift"] == ["mounts"]


def test_dhcp_address_comes_from_the_container():
    ct = spec(ip="dhcp")
    got = plan(ct, node_text(ct))
    assert got["address"] == "10.10.0.200" and got["drift"] == []
    no_addr = INSIDE_OK.replace("addr 10.10.0.200 ", "addr ")
    assert plan(ct, node_text(ct, inside=no_addr))["drift"] == ["boot"]


def test_bad_specs_are_rejected_before_the_node_is_read():
    merged, errors = probe.spec_errors([{"name": "ct1", "vmid": 99}], spec(), "kpro6", 512,
                                       120, 0)
    assert merged[0]["cores"] == 8
    assert any("proxmox_lxc_containers (node kpro6)[ct1].vmid: must be an integer" in e
               for e in errors)
    assert errors[-1] == ("proxmox_lxc_boot_timeout and proxmox_lxc_shutdown_timeout must be "
                          "> 0 on kpro6")


def node_folders(tmp_path, data_mode: int):
    """The node's config and template folders and one data folder of ``data_mode``."""
    configs, templates, data = tmp_path / "lxc", tmp_path / "tmpl", tmp_path / "data"
    for d in (configs, templates, data):
        d.mkdir()
    data.chmod(data_mode)
    (templates / TEMPLATE).write_text("")
    return configs, templates, data


def test_the_script_reads_configs_templates_and_paths_on_a_real_shell(tmp_path):
    configs, templates, data = node_folders(tmp_path, 0o755)
    ct = spec(mounts=[{"host_path": str(data), "path": "/srv/models"},
                      {"host_path": str(tmp_path / "missing dir"), "path": "/srv/x"}])
    (configs / "200.conf").write_text(config_text(ct) + "\n[snapshot1]\nmemory: 1\n")
    other = spec(name="ct201", vmid=201, hostname="ct201")
    # /bin/false stands for a pct whose exec and status fail: the container is not running
    script = probe.probe_script([ct, other], "/bin/false", str(configs), str(templates), KEY)
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    sections = probe.parse_sections(out.stdout)
    assert "config 201" not in sections and "inside 201" not in sections
    assert pct.pve_conf_parse(sections["config 200"])["options"]["memory"] == "65536"
    node = probe.node_facts(sections)
    assert node["templates"] == [TEMPLATE]
    assert list(node["paths"]) == [str(data)] and node["paths"][str(data)][0] == "755"
    got = probe.plan_container(ct, sections, node, "kpro6", str(templates), [], KEY)
    assert got["drift"] == ["mounts", "start"]
    assert probe.plan_container(other, sections, node, "kpro6", str(templates), [],
                                KEY)["drift"] == ["create", "mounts"]


def test_an_existing_mount_directory_keeps_its_mode(tmp_path):
    """A role inside may chmod the bind-mounted directory (sglang_serve's cache: 0750, the same
    inode as the node's): that is no drift, or the two roles would undo each other each run."""
    configs, templates, data = node_folders(tmp_path, 0o750)
    ct = spec(mounts=[{"host_path": str(data), "path": "/var/cache/sglang"}])
    (configs / "200.conf").write_text(config_text(ct))
    script = probe.probe_script([ct], "/bin/false", str(configs), str(templates), KEY)
    out = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True)
    sections = probe.parse_sections(out.stdout)
    node = probe.node_facts(sections)
    assert node["paths"][str(data)][0] == "750"
    assert "mounts" not in probe.plan_container(ct, sections, node, "kpro6", str(templates),
                                                [], KEY)["drift"]


def golden_config(template=True):
    golden = spec(name="golden", vmid=260, hostname="golden", ip="10.10.0.60/24")
    lines = ["template: 1"] if template else []
    text = config_text(golden).replace("rootfs", "rootfsx") + "\n" + "\n".join(lines)
    return f"## config 260\n{text}\n"


def test_a_container_cloned_from_a_template_drifts_clone_and_keeps_what_the_template_has():
    ct = spec(clone_from=260)
    got = plan(ct, node_text(ct, config=False, templates="") + golden_config())
    assert got["drift"] == ["clone"] and got["problems"] == []  # no OS template needed
    cfg = got["clone_config"]["options"]
    assert "template" not in cfg and cfg["hostname"] == "ct200"
    # after the clone, pct set changes only what differs from the template: the address
    assert pct.pct_set_args(ct, got["clone_config"]) == [
        "--net0", "name=eth0,bridge=vmbr0,ip=10.10.0.200/24,gw=10.10.0.1"]


def test_the_probe_reads_the_templates_config_but_never_execs_in_it():
    ct = spec(clone_from=260)
    script = probe.probe_script([ct], "pct", "/etc/pve/lxc", "/tpl")
    assert "'## config 260'" in script and "exec 260" not in script
    assert '"$pct" exec 200' in script


def test_clone_from_a_container_that_is_not_a_template_is_refused():
    ct = spec(clone_from=260)
    got = plan(ct, node_text(ct, config=False) + golden_config(template=False))
    assert got["problems"] == [
        "proxmox_lxc_containers[ct200].clone_from: CT 260 on kpro6 is not a template; make it "
        "one first (the proxmox_lxc role's template tasks, i.e. `pct template 260` after a "
        "shutdown)"]


def test_clone_from_a_template_the_node_does_not_have_is_refused():
    ct = spec(clone_from=260)
    got = plan(ct, node_text(ct, config=False))
    assert got["problems"][0].startswith(
        "proxmox_lxc_containers[ct200].clone_from: CT 260 does not exist on kpro6")


def test_an_existing_clone_converges_like_any_container_and_recreate_clones_again():
    ct = spec(clone_from=260)
    assert plan(ct, node_text(ct))["drift"] == []  # the template is not even needed now
    got = plan(ct, node_text(ct) + golden_config(), recreate=["ct200"])
    assert got["drift"] == ["recreate", "clone"] and got["problems"] == []


def test_a_vmid_held_by_a_template_is_refused():
    ct = spec(vmid=260, hostname="golden", name="golden")
    text = node_text(ct, config=config_text(ct) + "\ntemplate: 1")
    got = plan(ct, text)
    assert got["problems"] == [
        "proxmox_lxc_containers[golden].vmid: CT 260 on kpro6 is a template (it cannot be "
        "started); give this container another vmid, and clone it from the template with "
        "clone_from: 260"]


def test_clone_spec_errors():
    base = spec(clone_from=200)
    errors = lxc_spec.lxc_container_errors([base], "kpro6")
    assert errors == [
        "proxmox_lxc_containers (node kpro6)[ct200].clone_from: 200 is this container's own "
        "vmid (taken by the template); fix: give the clone a vmid of its own"]
    errors = lxc_spec.lxc_container_errors([spec(clone_from="golden", clone_full="yes")], "kpro6")
    assert [e.split(": ")[0] for e in errors] == [
        "proxmox_lxc_containers (node kpro6)[ct200].clone_from",
        "proxmox_lxc_containers (node kpro6)[ct200].clone_full"]
