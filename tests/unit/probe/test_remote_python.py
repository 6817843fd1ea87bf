"""The bare run of a module_utils function on the target (plugins/plugin_utils/remote_python.py):
the program the action plugin state_probe sends to the target's Python, run here by a Python
that cannot import Ansible (-S: no site-packages), against the probe's answer in-process."""

from __future__ import annotations

import importlib
import json
import re
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from ansible_collections.sglang_lxc.serving.plugins.module_utils import state_probe
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import remote_python

MODULE = remote_python.PACKAGE + "state_probe"


def bare(program: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-S", "-"], input=program, capture_output=True,
                          text=True, check=False, timeout=60)


def test_the_program_gives_the_modules_answer_without_ansible(tmp_path):
    (tmp_path / "etc").mkdir()
    (tmp_path / "etc/app.conf").write_text("x = 1\n")
    (tmp_path / "record.json").write_text(json.dumps({"version": "1", "at": 5}))
    concerns = [
        {"name": "tree", "paths": [{"path": str(tmp_path / "etc"), "state": "directory"}]},
        {"name": "conf", "files": [{"path": str(tmp_path / "etc/app.conf"), "sha1": "0" * 40}]},
        {"name": "record", "records": [{"path": str(tmp_path / "record.json"),
                                        "equal": {"version": "1"}, "ignore": ["at"]}]},
        {"name": "gone", "paths": [{"path": str(tmp_path / "nope"), "state": "file"}],
         "follows": ["conf"]},
    ]
    params, errors = remote_python.validate(state_probe.ARGUMENT_SPEC, {"concerns": concerns})
    assert errors == []
    assert params["stats"] == [] and params["dpkg_status"] == state_probe.DPKG_STATUS
    proc = bare(remote_python.payload(MODULE, "answer", params))
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer == json.loads(json.dumps(state_probe.answer(**params)))
    assert answer["drifted"] == ["conf", "gone"]
    assert answer["drift"]["gone"][0] == "follows conf, which drifted"


def test_a_failing_function_fails_the_task_with_its_error():
    params, errors = remote_python.validate(state_probe.ARGUMENT_SPEC,
                                            {"concerns": [{"name": "a"}, {"name": "a"}]})
    assert errors == []
    answer = json.loads(bare(remote_python.payload(MODULE, "answer", params)).stdout)
    assert answer == {"failed": True, "msg": "every concern needs a unique name, got ['a', 'a']"}
    params["concerns"] = "not a list of dicts"
    answer = json.loads(bare(remote_python.payload(MODULE, "answer", params)).stdout)
    assert answer["failed"] and answer["msg"].startswith("AttributeError")


def test_bad_arguments_are_refused_on_the_controller():
    _params, errors = remote_python.validate(state_probe.ARGUMENT_SPEC, {"concernz": []})
    assert any("concerns" in e for e in errors) and any("concernz" in e for e in errors)


def test_only_files_that_import_nothing_of_ansible_are_shipped():
    shipped = remote_python.sources(MODULE)
    assert set(shipped) == {MODULE, remote_python.PACKAGE + "cuda_links"}
    with pytest.raises(ImportError, match="imports Ansible"):
        remote_python.sources("ansible_collections.sglang_lxc.serving.plugins.plugin_utils."
                              "remote_python")


class Action:
    def __init__(self, pipelining=True, environment=None, async_val=0):
        self._task = SimpleNamespace(async_val=async_val, environment=environment or [{}])
        self._templar = SimpleNamespace(template=lambda value: value)
        self._pipelining = pipelining

    def _is_pipelining_enabled(self, style):
        return self._pipelining and style == "new"


@pytest.mark.parametrize(("action", "task_vars", "expected"), [
    (Action(), {"ansible_python_interpreter": "/usr/bin/python3"}, "/usr/bin/python3"),
    (Action(), {}, None),  # an interpreter to discover: the module finds it
    (Action(), {"ansible_python_interpreter": "auto_silent"}, None),
    (Action(pipelining=False), {"ansible_python_interpreter": "/usr/bin/python3"}, None),
    (Action(environment=[{"A": "1"}]), {"ansible_python_interpreter": "/usr/bin/python3"}, None),
    (Action(async_val=30), {"ansible_python_interpreter": "/usr/bin/python3"}, None),
])
def test_the_module_runs_as_usual_where_the_bare_run_would_differ(action, task_vars, expected):
    assert remote_python.fast_path(action, task_vars) == expected


def test_the_stack_probe_runs_bare_too(tmp_path):
    from ansible_collections.sglang_lxc.serving.plugins.module_utils import sglang_stack_probe

    params, errors = remote_python.validate(sglang_stack_probe.ARGUMENT_SPEC, {
        "venv": str(tmp_path / "venv"), "release": "r1", "pins": ["sglang==0.5.12"],
        "python": sys.executable,
        "concerns": [{"name": "record", "paths": [{"path": str(tmp_path), "state": "directory"}]}],
    })
    assert errors == []
    module = remote_python.PACKAGE + "sglang_stack_probe"
    proc = bare(remote_python.payload(module, "answer", params))
    assert proc.returncode == 0, proc.stderr
    answer = json.loads(proc.stdout)
    assert answer == json.loads(json.dumps(sglang_stack_probe.answer(**params)))
    assert answer["drifted"] and answer["reasons"] == [f"{tmp_path}/venv does not exist"]
    assert answer["python_version"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert answer["state"]["drifted"] == []


# the bare actions: those that name the module_utils they run on the host (UTIL = "...")
BARE_ACTIONS = sorted(p.stem for p in (Path(__file__).parents[3] / "plugins/action").glob("*.py")
                      if re.search(r"^\s+UTIL = ", p.read_text(), re.M))


@pytest.mark.parametrize("action", BARE_ACTIONS)
def test_every_bare_action_ships_what_its_module_utils_imports(action):
    """Each module_utils a bare action names is shipped with every file of this collection it
    imports, in either spelling of the import, and imports under -S with only those."""
    plugins = remote_python.PACKAGE.removesuffix("module_utils.")
    plugin = importlib.import_module(f"{plugins}action.{action}")
    module = remote_python.PACKAGE + plugin.ActionModule.UTIL
    shipped = remote_python.sources(module)
    local = re.findall(r"^\s*(?:from|import) ansible_collections\.[\w.]+", shipped[module], re.M)
    for line in local:
        assert line.split()[1].startswith(remote_python.PACKAGE.rstrip(".")), line
    program = (remote_python.payload(module, "answer", {}).split("sys.meta_path.insert")[0]
               + f"sys.meta_path.insert(0, _Sources())\nimport {module}\nprint('imported')\n")
    proc = bare(program)
    assert proc.returncode == 0 and proc.stdout.strip() == "imported", proc.stderr


def test_a_package_import_of_a_module_utils_is_followed():
    shipped = remote_python.sources(remote_python.PACKAGE + "sglang_kernel_cubins")
    assert remote_python.PACKAGE + "json_cache" in shipped


def test_a_no_log_argument_is_masked_in_the_bare_answer():
    """The readiness round takes the API key (no_log); SGLang logs its server_args, so a log tail
    in the answer may hold it: the action masks it as AnsibleModule would."""
    from ansible_collections.sglang_lxc.serving.plugins.action.sglang_readiness import (
        ActionModule,
    )

    key = "sk-lab-0123456789"
    sent = {}

    class Target:
        _task = SimpleNamespace(args={"instances": [], "api_key": key})

        def _low_level_execute_command(self, cmd, sudoable, in_data):
            sent.update(cmd=cmd, program=in_data)
            tail = [f"server_args=ServerArgs(api_key='{key}', port=30000)"]
            return {"rc": 0, "stdout": json.dumps({"instances": [{"log_tail": tail}]})}

    answer = remote_python.bare_answer(Target(), "/usr/bin/python3", ActionModule)
    assert key not in json.dumps(answer)
    assert answer["instances"][0]["log_tail"] == [
        "server_args=ServerArgs(api_key='********', port=30000)"]
    assert key not in sent["cmd"] and key in sent["program"]  # on stdin, not the command line
    bad = remote_python.bare_answer(
        SimpleNamespace(_task=SimpleNamespace(args={"api_key": key})), "/usr/bin/python3",
        ActionModule)
    assert bad["failed"] and "instances" in bad["msg"] and key not in bad["msg"]
