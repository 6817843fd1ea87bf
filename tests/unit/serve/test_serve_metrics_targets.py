"""Prometheus file_sd targets of a host's instances and router
(plugins/plugin_utils/prometheus_targets.py, filters in plugins/filter/prometheus_targets.py)."""

from __future__ import annotations

import json
import re

import pytest
import yaml
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import (
    prometheus_targets as targets,
)
from serve_helpers import ROOT, serve_instances

from tests.loaders import load_file

LABEL = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")


def instances(host="127.0.0.1", metrics=True, **extra):
    settings = {
        "instances": [{"name": "gpu0", "gpus": [0], "port": 30000},
                      {"name": "gpu1", "gpus": [1], "port": 30001, **extra}],
        "model_path": "/srv/models/llama", "served_model_name": "llama",
        "enable_metrics": metrics, "host": host, "allow_insecure_bind": True,
    }
    return serve_instances.sglang_serve_instances(settings, 2)


def assert_file_sd(entries):
    """What Prometheus' file_sd reads: a list of {targets: [str], labels: {name: str}}."""
    entries = json.loads(json.dumps(entries))
    assert isinstance(entries, list)
    for entry in entries:
        assert set(entry) == {"targets", "labels"}
        assert entry["targets"] and all(isinstance(t, str) for t in entry["targets"])
        assert all(LABEL.match(k) and isinstance(v, str) for k, v in entry["labels"].items())


def test_loopback_bind_is_listed_there_with_its_labels():
    found = targets.serve_targets(instances(), "ct200", "10.0.3.200")
    assert_file_sd(found)
    assert found == [
        {"targets": ["127.0.0.1:30000"],
         "labels": {"job": "sglang", "host": "ct200", "sglang_instance": "gpu0",
                    "served_model": "llama", "unit": "sglang@gpu0.service",
                    "scope": "loopback"}},
        {"targets": ["127.0.0.1:30001"],
         "labels": {"job": "sglang", "host": "ct200", "sglang_instance": "gpu1",
                    "served_model": "llama", "unit": "sglang@gpu1.service",
                    "scope": "loopback"}},
    ]


def test_any_address_bind_is_listed_at_ansible_host_else_the_inventory_name():
    found = targets.serve_targets(instances("0.0.0.0"), "ct200", "10.0.3.200")
    assert [e["targets"] for e in found] == [["10.0.3.200:30000"], ["10.0.3.200:30001"]]
    assert {e["labels"]["scope"] for e in found} == {"network"}
    found = targets.serve_targets(instances("0.0.0.0"), "ct200.lan")
    assert found[0]["targets"] == ["ct200.lan:30000"]
    assert found[0]["labels"]["scope"] == "network"
    # an ansible_host that is itself loopback (a local connection) says so
    assert targets.serve_targets(instances("0.0.0.0"), "localhost", "127.0.0.1")[0][
        "labels"]["scope"] == "loopback"


def test_a_lan_address_and_ipv6_binds():
    found = targets.serve_targets(instances("192.0.2.10"), "ct200", "10.0.3.200")
    assert found[0]["targets"] == ["192.0.2.10:30000"]
    assert found[0]["labels"]["scope"] == "network"
    assert targets.target_address("::1", 30000, "ct200") == ("[::1]:30000", "loopback")
    assert targets.target_address("::", 29000, "ct200", "fd00::5") == ("[fd00::5]:29000",
                                                                      "network")
    assert targets.target_address("localhost", 29000, "ct200") == ("127.0.0.1:29000",
                                                                  "loopback")


def test_instances_without_metrics_are_left_out():
    assert targets.serve_targets(instances(metrics=False), "ct200") == []
    # one instance turns them off for itself
    found = targets.serve_targets(instances(enable_metrics=False), "ct200")
    assert [e["labels"]["sglang_instance"] for e in found] == ["gpu0"]
    # one instance turns them on through its extra arguments
    found = targets.serve_targets(
        instances(metrics=False, extra_args=["--enable-metrics"]), "ct200")
    assert [e["labels"]["sglang_instance"] for e in found] == ["gpu1"]
    # an explicit enable_metrics on the instance wins over its arguments
    assert targets.metrics_enabled({"enable_metrics": "false", "argv": ["--enable-metrics"]}) \
        is False
    assert targets.serve_targets(None, "ct200") == []


def test_router_target():
    found = targets.router_targets("127.0.0.1", 29000, "ct200", "10.0.3.200")
    assert_file_sd(found)
    assert found == [{"targets": ["127.0.0.1:29000"],
                      "labels": {"job": "sglang-router", "host": "ct200",
                                 "unit": "sglang-router.service", "scope": "loopback"}}]
    found = targets.router_targets("0.0.0.0", "29000", "ct200", "10.0.3.200")
    assert found[0]["targets"] == ["10.0.3.200:29000"]
    assert found[0]["labels"]["scope"] == "network"


@pytest.mark.parametrize("port", [0, 70000, "x", True, None])
def test_a_bad_port_is_refused(port):
    with pytest.raises(targets.TargetError):
        targets.router_targets("127.0.0.1", port, "ct200")


def test_the_filters_wrap_the_library():
    module = load_file("prometheus_targets_filter", ROOT / "plugins/filter/prometheus_targets.py")
    filters = module.FilterModule().filters()
    assert set(filters) == {"sglang_serve_metrics_targets", "sglang_router_metrics_targets"}
    assert filters["sglang_serve_metrics_targets"](instances(), "ct200", "10.0.3.200") == \
        targets.serve_targets(instances(), "ct200", "10.0.3.200")
    assert filters["sglang_router_metrics_targets"]("127.0.0.1", 29000, "ct200") == \
        targets.router_targets("127.0.0.1", 29000, "ct200")


def test_the_role_publishes_its_targets_and_records_them():
    role = ROOT / "roles/sglang_serve"
    main = yaml.safe_load((role / "tasks/main.yml").read_text())
    names = [t.get("ansible.builtin.import_tasks") or t.get("ansible.builtin.include_tasks")
             for t in main]
    assert names.index("targets.yml") == names.index("readiness.yml") + 1
    imported = next(t for t in main if t.get("ansible.builtin.import_tasks") == "targets.yml")
    assert "when" not in imported  # check mode and a disabled readiness wait publish too
    (task,) = yaml.safe_load((role / "tasks/targets.yml").read_text())
    stats = task["ansible.builtin.set_stats"]
    assert (stats["aggregate"], stats["per_host"]) == (True, False)
    assert "inventory_hostname: __sglang_serve_metrics_targets" in stats["data"][
        "prometheus_targets"]
    assert "when" not in task and "check_mode" not in task
    variables = yaml.safe_load((role / "vars/main.yml").read_text())
    assert variables["__sglang_serve_record_published"]["prometheus_targets"] == \
        "{{ __sglang_serve_metrics_targets }}"
    assert "__sglang_serve_record_published" in variables["__sglang_serve_record_body"]
    assert "sglang_lxc.serving.sglang_serve_metrics_targets(" in variables[
        "__sglang_serve_metrics_targets"]
