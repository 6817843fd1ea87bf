"""The router role's check before any change runs the validate play's own rules
(validate_router.role_problems, filter sglang_router_problems), with the workers' URLs for the
instances, and never shows a key it refuses."""

from __future__ import annotations

import yaml
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import validate_router

from tests.loaders import ROOT, load_file

DEFAULTS = yaml.safe_load((ROOT / "roles/sglang_router/defaults/main.yml").read_text())
WORKERS = {"sglang_router_workers": ["http://127.0.0.1:30000", "http://127.0.0.1:30001"]}


def check(**changes):
    return validate_router.role_problems({**DEFAULTS, **WORKERS, **changes}, "ct200")


def test_the_defaults_pass():
    assert check() == []


def test_each_rule_names_its_variable():
    [port] = check(sglang_router_port=30001)
    assert port.startswith("ct200: sglang_router_port = 30001: instance http://127.0.0.1:30001")
    [metrics] = check(sglang_router_prometheus_port=30000)
    assert "sglang_router_prometheus_port" in metrics
    [bind] = check(sglang_router_host="0.0.0.0")
    assert "sglang_router_allow_insecure_bind: true" in bind
    assert check(sglang_router_host="0.0.0.0", sglang_router_allow_insecure_bind=True) == []
    [zero] = check(sglang_router_cb_timeout_duration_secs=0)
    assert zero.startswith("ct200: sglang_router_cb_timeout_duration_secs = 0:")
    [quote] = check(sglang_router_extra_args=["--policy", "a;b"])
    assert "ExecStart" in quote


def test_a_key_in_the_extra_args_is_refused_without_being_shown():
    [key] = check(sglang_router_extra_args=["--api-key=sk-TOPSECRET"])
    assert "carries --api-key" in key
    assert "TOPSECRET" not in key


def test_the_validate_play_applies_the_same_rules_where_a_router_runs():
    values = {**DEFAULTS, "sglang_router_enabled": True, "sglang_router_port": 30000}
    instances = [{"name": "cpu0", "port": 30000}]
    assert validate_router.router_problems("ct200", values, instances) == \
        validate_router.input_problems("ct200", values, instances)
    assert validate_router.router_problems("ct200", {**values, "sglang_router_enabled": False},
                                           instances) == []


def test_the_role_asks_the_filter():
    module = load_file("sglang_router_filter", ROOT / "plugins/filter/sglang_router.py")
    filters = module.FilterModule().filters()
    assert filters["sglang_router_problems"] is validate_router.role_problems
    tasks = (ROOT / "roles/sglang_router/tasks/main.yml").read_text()
    assert "vars | sglang_lxc.serving.sglang_router_problems(inventory_hostname)" in tasks
