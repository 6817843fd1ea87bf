"""sglang_serve's settings have one table: meta/argument_specs.yml, written once.

Everything else that names a setting is checked against it here: defaults/main.yml (names,
values, types), tasks/validate.yml (passes exactly the SETTINGS of
plugins/plugin_utils/serve_instances.py), its OVERRIDABLE keys, the validate action plugin, and
the README's list of instance keys.
"""

from __future__ import annotations

import re

import yaml
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import serve_instances as serve

from tests.loaders import ROOT

ROLE = ROOT / "roles" / "sglang_serve"

TYPES = {
    "bool": bool, "int": int, "float": (int, float), "str": str, "path": str, "list": list,
    "dict": dict,
}


def spec() -> dict:
    return yaml.safe_load((ROLE / "meta" / "argument_specs.yml").read_text())["argument_specs"]


def options() -> dict:
    return spec()["main"]["options"]


def defaults() -> dict:
    return yaml.safe_load((ROLE / "defaults" / "main.yml").read_text())


def test_the_argument_spec_is_written_once_for_every_entry_point():
    entries = spec()
    assert set(entries) == {"main", "rolling_restart"}
    # a YAML alias: the same object, not a copy that can drift
    assert entries["rolling_restart"]["options"] is entries["main"]["options"]


def test_defaults_match_the_argument_spec():
    opts, values = options(), defaults()
    assert sorted(values) == sorted(opts)
    for name, option in opts.items():
        value = values[name]
        if "default" in option:
            assert value == option["default"], name
        else:  # only templated defaults are left out of the spec
            assert "{{" in yaml.safe_dump(value), name
            continue
        if value is not None:
            assert isinstance(value, TYPES[option["type"]]), (name, value)
            if option["type"] != "float":
                assert not (option["type"] == "int" and isinstance(value, bool)), name
        assert option.get("description"), name


def test_validate_passes_exactly_the_settings_the_filter_reads():
    tasks = yaml.safe_load((ROLE / "tasks" / "validate.yml").read_text())
    (task,) = [t for t in tasks if "__sglang_serve_settings" in t.get("vars", {})]
    passed = task["vars"]["__sglang_serve_settings"]
    assert list(passed) == list(serve.SETTINGS)
    opts = options()
    for key, expr in passed.items():
        name = f"sglang_serve_{key}"
        assert name in opts, name
        assert re.fullmatch(r"\{\{ " + name + r"( \| bool)? \}\}", expr), expr
        # booleans are converted before the filter sees them ("false" from -e is not true)
        assert ("| bool" in expr) == (opts[name]["type"] == "bool"), expr


def test_instance_overrides_are_role_settings():
    opts = options()
    for key in serve.OVERRIDABLE:
        assert f"sglang_serve_{key}" in opts, key
        assert key in serve.SETTINGS, key


def test_unknown_settings_are_refused():
    try:
        serve.sglang_serve_instances({"model_path": "m", "hots": "0.0.0.0"}, 1)
    except serve.ServeConfigError as exc:
        assert "hots" in str(exc)
    else:
        raise AssertionError("an unknown setting was accepted")


def test_the_validate_plugin_reads_the_same_settings():
    text = (ROOT / "plugins" / "plugin_utils" / "validate_serving.py").read_text()
    assert "SERVE_SETTINGS = serve.SETTINGS" in text


def test_readme_lists_the_instance_keys():
    readme = (ROLE / "README.md").read_text()
    listed = re.search(r"Keys: (.*?)\.\n", readme, re.S).group(1)
    names = set(re.findall(r"`([a-z0-9_*]+)`", listed))
    expected = {k for k in serve.INSTANCE_KEYS if not k.startswith("eagle3_")} | {"eagle3_*"}
    assert names == expected
