"""The lab's main container serves on the CPU: its host_vars expand to two CPU instances that its
memory holds (two instances OOM'd in 4 GiB)."""

from __future__ import annotations

import yaml
from serve_helpers import ROOT, serve_instances

LAB = ROOT / "inventory" / "lab"


def load(path):
    return yaml.safe_load(path.read_text())


def test_ct200_serves_two_cpu_instances_that_fit_its_memory():
    defaults = load(ROOT / "roles/sglang_serve/defaults/main.yml")
    host = load(LAB / "host_vars/ct200/serve.yml")
    merged = {**defaults, **host}
    # as tasks/validate.yml reads them (templated values left out: they need Ansible)
    settings = serve_instances.role_settings(
        {name: value for name, value in merged.items() if "{{" not in str(value)})
    instances = serve_instances.sglang_serve_instances(settings, 0)
    assert [(i["name"], i["device"], i["port"]) for i in instances] == [
        ("cpu0", "cpu", 30000),
        ("cpu1", "cpu", 30001),
    ]
    for instance in instances:
        argv = instance["argv"]
        assert argv[argv.index("--max-total-tokens") + 1] == "4096"
        assert "--sleep-on-idle" in argv
    memory = load(LAB / "group_vars/proxmox_nodes/proxmox_lxc.yml")[
        "proxmox_lxc_container_defaults"
    ]["memory"]
    # sglang::router peaked at 977,502,208 bytes (932 MiB) beside them; 512 MiB for the rest
    assert memory >= len(instances) * defaults["sglang_serve_cpu_instance_mib"] + 932 + 512
    assert host["sglang_router_enabled"] is True
    assert host["sglang_serve_model_path"] == load(LAB / "group_vars/all/lab.yml")["lab_model_name"]
