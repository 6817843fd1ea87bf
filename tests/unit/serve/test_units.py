"""Both SGLang units carry the one shared sandbox (plugins/plugin_utils/systemd_hardening.py).

The two templates are rendered with Jinja and ansible-core's own filters, from the roles'
defaults, and their [Service] sections compared.
"""

from __future__ import annotations

import configparser

import jinja2
import pytest
import yaml
from ansible.plugins.filter.core import FilterModule as CoreFilters
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import (
    systemd_hardening as hardening,
)

from tests.loaders import ROOT, load_file

hardening_filters = load_file("hardening_filter", ROOT / "plugins/filter/systemd_hardening.py")

SERVE = ROOT / "roles" / "sglang_serve"
ROUTER = ROOT / "roles" / "sglang_router"


def defaults(role) -> dict:
    return yaml.safe_load((role / "defaults" / "main.yml").read_text())


def render(role, template: str, **overrides) -> dict[str, list[str]]:
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(CoreFilters().filters())
    # the templates call the collection's filters by FQCN, as Ansible resolves them
    env.filters.update({f"sglang_lxc.serving.{name}": f
                        for name, f in hardening_filters.FilterModule().filters().items()})
    values = {**defaults(role), "ansible_managed": "managed", **overrides}
    values = {k: v for k, v in values.items() if not (isinstance(v, str) and "{{" in v)}
    values.setdefault("sglang_router_launch_command", ["/opt/sglang/venv/bin/python"])
    values.setdefault("__sglang_router_health_args", [])  # vars/main.yml: Ansible renders it
    text = env.from_string((role / "templates" / template).read_text()).render(values)
    parser = configparser.ConfigParser(strict=False, interpolation=None, delimiters=("=",))
    parser.optionxform = str
    parser.read_string(text)
    return dict(parser["Service"])


def serve_unit(**overrides):
    return render(SERVE, "sglang@.service.j2", **overrides)


def router_unit(**overrides):
    return render(ROUTER, "sglang-router.service.j2", **overrides)


def test_both_units_carry_the_same_hardening():
    serve, router = serve_unit(), router_unit()
    assert len(hardening.HARDENING) == 19
    for key, value in hardening.HARDENING.items():
        assert serve[key] == value, key
        assert router[key] == value, key
    # what each unit adds for itself
    assert serve["DevicePolicy"] == "closed" and "PrivateDevices" not in serve
    assert router["PrivateDevices"] == "yes"
    assert serve["UMask"] == router["UMask"] == "0027"


def test_overrides_change_and_drop_settings():
    unit = router_unit(sglang_router_hardening={"ProtectHome": "read-only", "ProtectClock": None})
    assert unit["ProtectHome"] == "read-only"
    assert "ProtectClock" not in unit
    assert unit["NoNewPrivileges"] == "yes"
    assert serve_unit(sglang_serve_hardening={"PrivateTmp": False})["PrivateTmp"] == "no"


@pytest.mark.parametrize(
    "bad", [["NoNewPrivileges"], {"Bad Key": "yes"}, {"ProtectHome": "yes\nExecStartPre=/x"}]
)
def test_bad_overrides_are_refused(bad):
    with pytest.raises(hardening.AnsibleFilterError):
        hardening.sglang_unit_hardening(bad)


def render_text(template: str, **values) -> str:
    env = jinja2.Environment(trim_blocks=True, undefined=jinja2.StrictUndefined)
    env.filters.update(CoreFilters().filters())
    values = {**defaults(SERVE), "ansible_managed": "managed", **values}
    values = {k: v for k, v in values.items() if not (isinstance(v, str) and "{{" in v)}
    return env.from_string((SERVE / "templates" / template).read_text()).render(values)


@pytest.mark.parametrize(
    "key", ["sk-test-7f3a9c1e5b", "a: b # c", 'q"uo\\te', "ünï", "-dash", "123"]
)
def test_the_config_file_gives_yaml_the_key_exactly(key):
    """PyYAML (what SGLang's ConfigArgumentMerger reads with) returns the key unchanged."""
    item = {"name": "gpu0"}
    text = render_text("instance.yaml.j2", item=item, sglang_serve_api_key=key)
    assert yaml.safe_load(text) == {"api-key": key}
    assert yaml.safe_load(render_text("instance.yaml.j2", item=item)) is None  # no key: no options
    args = render_text("instance.args.j2", item={"name": "gpu0", "argv": ["--port", "1"]},
                       sglang_serve_launch_command=["python"], sglang_serve_api_key=key)
    assert key not in args.splitlines()
    assert args.splitlines()[-2:] == ["--config", "/etc/sglang/instances/gpu0.yaml"]
