# Copyright: sglang-lxc contributors
# Apache-2.0
"""Run a function of this collection's module_utils on the target in one low-level command.

An Ansible module costs about 0.18 s on the target before it does anything: the AnsiballZ
wrapper imports ``ansible.module_utils.basic`` from a zip, with no bytecode cache (measured on
the lab: ``ping`` 0.20 s a task, ``raw`` 0.03 s). The probes that every rerun asks of every host
are read-only functions of plain Python (``module_utils`` files that import nothing of
Ansible), so their action plugins send the function, the files it imports from this collection
and its validated arguments to the target's Python on stdin, the way pipelining sends a module,
and read one JSON object back: the same code, the same answer, without the wrapper.

Used only where that is the same run as the module's: the connection pipelines (stdin reaches
the command, become needs no tty), the interpreter is named in the inventory
(``ansible_python_interpreter``: no discovery), the task has no ``environment`` and is not
async. Anywhere else the action runs the module as usual (``fast_path`` says which).
"""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from typing import Any, ClassVar

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.module_utils.common.parameters import remove_values
from ansible.plugins.action import ActionBase

PACKAGE = "ansible_collections.sglang_lxc.serving.plugins.module_utils."
# "from <package>.<name> import x" and "from <package> import a, b" (each a module of it).
_LOCAL_IMPORT = re.compile(
    r"^\s*from ansible_collections\.sglang_lxc\.serving\.plugins\.module_utils"
    r"(?:\.(\w+) import|\s+import\s+\(?([\w, ]+))",
    re.M,
)
_ANSIBLE_IMPORT = re.compile(r"^\s*(?:from|import) ansible\.", re.M)

# Runs on the target: serves the shipped sources to `import`, calls the function, prints JSON.
_BOOTSTRAP = """\
import importlib.abc, importlib.util, json, sys

_SOURCES = json.loads({sources})
_PARAMS = json.loads({params})


class _Sources(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path=None, target=None):
        package = any(s.startswith(name + ".") for s in _SOURCES)
        if name in _SOURCES or package:
            return importlib.util.spec_from_loader(name, self, is_package=package)
        return None

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        source = _SOURCES.get(module.__name__)
        if source is not None:
            path = module.__name__.replace(".", "/") + ".py"
            exec(compile(source, path, "exec"), module.__dict__)


sys.meta_path.insert(0, _Sources())
try:
    _result = getattr(importlib.import_module({module!r}), {function!r})(**_PARAMS)
except Exception as exc:  # the module would fail the task the same way
    import traceback
    _result = {{"failed": True, "msg": "%s: %s" % (type(exc).__name__, exc),
               "exception": traceback.format_exc()}}
sys.stdout.write(json.dumps(_result))
"""


def sources(module: str) -> dict[str, str]:
    """The source of ``module`` (a module_utils of this collection) and of every module_utils of
    this collection it imports, by module name. One that imports Ansible cannot run bare."""
    found: dict[str, str] = {}
    todo = [module]
    while todo:
        name = todo.pop()
        if name in found:
            continue
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            raise ImportError(f"{name} not found")
        text = spec.loader.get_source(name)  # type: ignore[attr-defined]
        if text is None:
            raise ImportError(f"{name} has no source")
        if isinstance(text, bytes):  # the collection loader's get_source
            text = text.decode("utf-8")
        if _ANSIBLE_IMPORT.search(text):
            raise ImportError(f"{name} imports Ansible: it runs only as a module")
        found[name] = text
        for submodule, names in _LOCAL_IMPORT.findall(text):
            for short in [submodule] if submodule else names.split(","):
                if short.strip():
                    todo.append(PACKAGE + short.split(" as ")[0].strip())
    return found


def payload(module: str, function: str, params: dict[str, Any]) -> str:
    """The program the target's Python reads on stdin."""
    return _BOOTSTRAP.format(
        sources=repr(json.dumps(sources(module))),
        params=repr(json.dumps(params)),
        module=module,
        function=function,
    )


def validate(
    argument_spec: dict[str, Any], args: dict[str, Any]
) -> tuple[dict[str, Any], list[str]]:
    """The module's argument spec applied on the controller, as AnsibleModule applies it on the
    target: (parameters with defaults and types, error messages). One difference: a ``path``
    argument's ``~`` expands to the controller user's home, so the probes take absolute paths
    (every role passes them so)."""
    return validated(argument_spec, args)[:2]


def validated(
    argument_spec: dict[str, Any], args: dict[str, Any]
) -> tuple[dict[str, Any], list[str], set[str]]:
    """validate(), and the values of the ``no_log`` arguments, which the answer must not show."""
    result = ArgumentSpecValidator(argument_spec).validate(args)
    return (result.validated_parameters, [str(m) for m in result.error_messages],
            set(result._no_log_values))  # what AnsibleModule masks in a module's result


def fast_path(action: Any, task_vars: dict[str, Any]) -> str | None:
    """The target's interpreter when the function may run bare (see the module docstring);
    None when the module must run as usual."""
    task = action._task
    if task.async_val or any(task.environment or []):  # a list of dicts, [{}] when none
        return None
    if not action._is_pipelining_enabled("new"):
        return None
    python = task_vars.get("ansible_python_interpreter")
    if not python:
        return None
    python = str(action._templar.template(python))
    if not python.startswith("/") or "{" in python:
        return None
    return python


def run(
    action: Any, python: str, module: str, function: str, params: dict[str, Any]
) -> dict[str, Any]:
    """Run ``module.function(**params)`` on the target with ``python``; its JSON answer, or a
    failed result naming what went wrong."""
    res = action._low_level_execute_command(
        f"{shlex.quote(python)} -", sudoable=True, in_data=payload(module, function, params)
    )
    out = res.get("stdout", "")
    try:
        answer = json.loads(out)
    except ValueError:
        return {
            "failed": True,
            "rc": res.get("rc"),
            "msg": f"{python} on the target gave no answer (rc {res.get('rc')}): "
                   f"{(res.get('stderr') or out).strip()[-2000:]}",
        }
    if not isinstance(answer, dict):
        return {"failed": True, "msg": f"{module}.{function} answered {type(answer).__name__}"}
    return answer


class BareModuleAction(ActionBase):
    """The action of a read-only module whose whole logic is ``FUNCTION`` of the module_utils
    ``UTIL`` (arguments: ``ARGUMENT_SPEC``): run bare where that is the module's run, else the
    module ``MODULE`` as usual."""

    MODULE = ""
    UTIL = ""
    ARGUMENT_SPEC: ClassVar[dict[str, Any]] = {}
    FUNCTION = "answer"
    _requires_connection = True

    def run(self, tmp=None, task_vars=None):
        task_vars = task_vars or {}
        result = super().run(tmp, task_vars)
        python = fast_path(self, task_vars)
        if python is None:
            result.update(self._execute_module(module_name=self.MODULE, module_args=self._task.args,
                                               task_vars=task_vars))
            return result
        result.update(bare_answer(self, python, self))
        return result


def bare_answer(action: Any, python: str, spec: BareModuleAction) -> dict[str, Any]:
    """The bare run's result for ``spec`` (a BareModuleAction's MODULE, UTIL, ARGUMENT_SPEC,
    FUNCTION) and the task's arguments: refused on bad arguments, and, as AnsibleModule's
    exit_json does, every ``no_log`` value masked (an API key in a log tail)."""
    params, errors, secrets = validated(spec.ARGUMENT_SPEC, action._task.args)
    if errors:
        return {"failed": True, "msg": f"{spec.MODULE}: " + "; ".join(errors)}
    answer = run(action, python, PACKAGE + spec.UTIL, spec.FUNCTION, params)
    return remove_values(answer, secrets) if secrets else answer
