"""sglang_serve's instance settings have one list: SETTINGS, OVERRIDABLE and INSTANCE_KEYS of
plugins/plugin_utils/serve_instances.py (name -> type).

Everything else that names them is derived from it or checked against it here: the role's
variables and the suboptions of sglang_serve_instances in meta/argument_specs.yml (written out:
Ansible reads them statically), defaults/main.yml (names, values, types), tasks/validate.yml and
the validate action plugin (both hand the variables to role_settings), and the README's list of
instance keys. A second copy of the list anywhere else fails test_the_list_has_no_second_copy.
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


class Recording(dict):
    """A mapping that records what is read of it (as Ansible's lazy ``vars`` is read)."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.read: list[str] = []

    def get(self, key, default=None):
        self.read.append(key)
        return super().get(key, default)


def test_validate_hands_the_role_variables_to_the_one_list():
    tasks = yaml.safe_load((ROLE / "tasks" / "validate.yml").read_text())
    (task,) = [t for t in tasks
               if "__sglang_serve_instances" in t.get("ansible.builtin.set_fact", {})]
    expr = " ".join(task["ansible.builtin.set_fact"]["__sglang_serve_instances"].split())
    assert expr.startswith("{{ vars | sglang_lxc.serving.sglang_serve_settings | "
                           "sglang_lxc.serving.sglang_serve_instances("), expr
    variables = Recording({"sglang_serve_api_key": "secret", "sglang_serve_port_base": 31000})
    settings = serve.role_settings(variables)
    assert variables.read == [f"sglang_serve_{key}" for key in serve.SETTINGS]  # nothing else
    assert list(settings) == list(serve.SETTINGS)
    assert settings["port_base"] == 31000


def test_booleans_are_read_as_ansibles_bool_filter_reads_them():
    """"false" from -e is false, for a role variable and for an instance's override alike."""
    settings = serve.role_settings({"sglang_serve_allow_insecure_bind": "false",
                                    "sglang_serve_hf_offline": "yes",
                                    "sglang_serve_enable_metrics": None})
    assert settings["allow_insecure_bind"] is False
    assert settings["hf_offline"] is True
    assert settings["enable_metrics"] is False
    assert settings["host"] is None  # not a boolean: as given
    base = {"device": "cpu", "model_path": "/srv/models/m", "served_model_name": "m",
            "model_store": "/srv/models", "multithread_load": True}
    [instance] = serve.sglang_serve_instances(
        {**base, "instances": [{"name": "a", "multithread_load": "false"}]}, 0)
    assert "--model-loader-extra-config" not in instance["argv"], instance["argv"]
    try:
        serve.role_settings({"sglang_serve_hf_offline": "maybe"})
    except serve.ServeConfigError as exc:
        assert "sglang_serve_hf_offline must be a boolean" in str(exc)
    else:
        raise AssertionError("a value that is not a boolean was accepted")


def test_the_argument_spec_holds_the_list():
    opts = options()
    for key, kind in serve.SETTINGS.items():
        assert opts[f"sglang_serve_{key}"]["type"] == kind, key
    suboptions = opts["sglang_serve_instances"]["options"]
    assert {k: v["type"] for k, v in suboptions.items()} == serve.INSTANCE_KEYS
    for key in serve.OVERRIDABLE:  # an override is what the role variable is
        role = opts[f"sglang_serve_{key}"]
        assert suboptions[key].get("elements") == role.get("elements"), key
        assert f"sglang_serve_{key}" in suboptions[key]["description"], key
    assert all(v.get("description") for v in suboptions.values())


# Files that hold the list or check it: the one list, the argument spec, the defaults, the README
HOLDERS = {"plugins/plugin_utils/serve_instances.py", "roles/sglang_serve/meta/argument_specs.yml",
           "roles/sglang_serve/defaults/main.yml", "roles/sglang_serve/README.md"}


def test_the_list_has_no_second_copy():
    """No other file of the collection names most of the settings as keys or strings (the
    hand-built 29-key dict of tasks/validate.yml was one)."""
    keys = [k for k in serve.SETTINGS if len(k) > 4]  # names long enough to mean the setting
    for path in sorted((*ROOT.glob("plugins/**/*.py"), *ROOT.glob("roles/**/*.yml"),
                        *ROOT.glob("roles/**/*.j2"), *ROOT.glob("playbooks/**/*.yml"))):
        rel = str(path.relative_to(ROOT))
        if rel in HOLDERS:
            continue
        text = path.read_text()
        named = {k for k in keys
                 if re.search(rf"(^\s*-?\s*{k}:|[\"']{k}[\"'])", text, re.M)}
        assert len(named) < len(keys) // 2, (rel, sorted(named))


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
    assert "serve.role_settings(values)" in text


def test_readme_lists_the_instance_keys():
    readme = (ROLE / "README.md").read_text()
    listed = re.search(r"Keys: (.*?)\.\n", readme, re.S).group(1)
    names = set(re.findall(r"`([a-z0-9_*]+)`", listed))
    expected = {k for k in serve.INSTANCE_KEYS if not k.startswith("eagle3_")} | {"eagle3_*"}
    assert names == expected
