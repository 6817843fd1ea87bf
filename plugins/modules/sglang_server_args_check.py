#!/usr/bin/python
"""Parse each instance's command line with SGLang's own parser before any change is made."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_server_args_check
short_description: Parse SGLang command lines with SGLang's own parser before they are written
description:
  - Runs the serving venv's python once. It builds SGLang's own parser
    (C(ServerArgs.add_cli_args) on an C(argparse.ArgumentParser), as C(prepare_server_args)
    does), merges the instance's C(--config) options with SGLang's C(ConfigArgumentMerger), and
    parses every instance's arguments. It needs no GPU, and it stops before
    C(ServerArgs.from_cli_args), which asks torch for a device.
  - Fails when any instance's arguments are refused. The message names the instance, the
    variable the refused argument came from (the instance's C(argv_from)), and SGLang's own
    error text. Nothing is written and nothing is restarted.
  - The config options (the API key) reach the parser through a file in a private temporary
    folder (0700) that is removed at once. They are never passed on a command line.
  - Changes nothing; it runs the same in check mode, except that there a missing O(python) (a
    new host whose stack was only checked, not installed) skips the parse.
options:
  python:
    description: The serving venv's interpreter (it imports C(sglang.srt.server_args)).
    type: path
    required: true
  instances:
    description: >-
      Resolved instances (name, unit, argv, argv_from), as the sglang_serve_instances filter
      returns them.
    type: list
    elements: dict
    required: true
  config:
    description: Options that each instance's C(--config) file carries (e.g. C(api-key)).
    type: dict
    default: {}
  config_vars:
    description: >-
      The variable each O(config) option comes from, named (never its value) when SGLang
      refuses it.
    type: dict
    default: {}
  cache_dir:
    description:
      - Folder (root-only) of accepted verdicts. A verdict is kept under a hash of every
        instance's arguments, the config options (hashed, never stored) and the release the
        O(python) resolves to (its real path), so a rerun with the same arguments and the same
        release skips the parse (about a minute of CPU); a new release or any changed argument
        parses again. Refusals are never cached. Empty turns the cache off.
    type: path
    default: ''
  timeout:
    description: Seconds the parse may take (the import of SGLang included).
    type: float
    default: 120
author:
  - sglang-lxc contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Parse each instance's arguments with SGLang's own parser
  sglang_server_args_check:
    python: /opt/sglang/venv/bin/python
    instances: "{{ __sglang_serve_instances }}"
    config: {api-key: "{{ vault_sglang_api_key }}"}
"""

RETURN = r"""
results:
  description: One entry per instance (name, ok, error; model_path and port when it parsed).
  type: list
  elements: dict
  returned: always
import_seconds:
  description: Seconds the venv's python took to import SGLang's parser.
  type: float
  returned: when the parser ran
cpu_seconds:
  description: CPU seconds (user + system) of the parsing process, the import included.
  type: float
  returned: when the parser ran
seconds:
  description: Seconds the whole check took.
  type: float
  returned: always
cached:
  description: True when an accepted verdict for the same arguments and release was reused.
  type: bool
  returned: always
"""

import hashlib
import json
import os
import re
import subprocess
import time
from typing import Any

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang_lxc.serving.plugins.module_utils import json_cache

# Runs in the serving venv's python. Reads {"instances": [...], "config": {...}} on stdin.
PARSE_SCRIPT = r"""
import argparse, json, os, sys, tempfile, time
started = time.monotonic()
data = json.load(sys.stdin)
from sglang.srt.server_args import ServerArgs
from sglang.srt.server_args_config_parser import ConfigArgumentMerger
imported = time.monotonic()

class Refused(Exception):
    pass

class Parser(argparse.ArgumentParser):
    def error(self, message):
        raise Refused(message)

    def exit(self, status=0, message=None):
        raise Refused((message or "").strip() or f"exit {status}")

results = []
with tempfile.TemporaryDirectory() as private:
    config = os.path.join(private, "instance.yaml")
    with open(config, "w", encoding="utf-8") as handle:
        for key, value in data["config"].items():
            handle.write(f"{key}: {json.dumps(value)}\n")
    for instance in data["instances"]:
        parser = Parser(prog="sglang serve")
        ServerArgs.add_cli_args(parser)
        entry = {"name": instance["name"]}
        try:
            argv = ConfigArgumentMerger(parser).merge_config_with_args(
                list(instance["argv"]) + ["--config", config])
            namespace = parser.parse_args(argv)
            entry.update(ok=True, model_path=namespace.model_path, port=namespace.port)
        except (Refused, ValueError) as exc:
            entry.update(ok=False, error=str(exc))
        results.append(entry)
import resource
usage = resource.getrusage(resource.RUSAGE_SELF)
print(json.dumps({"results": results, "import_seconds": round(imported - started, 2),
                  "cpu_seconds": round(usage.ru_utime + usage.ru_stime, 2)}))
"""

_ARGUMENT = re.compile(r"^argument (\S+?): ")
_UNRECOGNIZED = "unrecognized arguments: "


def blame(argv: list[str], argv_from: list[str], error: str) -> list[tuple[str, list[str]]]:
    """The variables (with their arguments) that SGLang's ``error`` is about, in argv order.

    argparse names an option (``argument --tp-size/--tp: invalid int value: 'x'``) or lists what
    it did not know (``unrecognized arguments: --chnked 1``); either is found in ``argv``.
    """
    indexes: list[int] = []
    match = _ARGUMENT.match(error)
    if match:
        options = match.group(1).split("/")
        for i, arg in enumerate(argv):
            if any(arg == o or arg.startswith(o + "=") for o in options):
                indexes.append(i)
                if "=" not in arg and i + 1 < len(argv) and not argv[i + 1].startswith("--"):
                    indexes.append(i + 1)
    elif _UNRECOGNIZED in error:
        listed = f" {error.split(_UNRECOGNIZED, 1)[1].strip()} "
        indexes = [i for i, arg in enumerate(argv) if arg and f" {arg} " in listed]
    found: dict[str, list[str]] = {}
    for i in indexes:
        source = argv_from[i] if i < len(argv_from) else "the instance's arguments"
        found.setdefault(source, []).append(argv[i])
    return list(found.items())


def refusal_message(
    instance: dict[str, Any], error: str, config_vars: dict[str, str] | None = None
) -> str:
    """``sglang_serve_extra_args = [...] (sglang@gpu0.service): SGLang's own parser refuses ...``

    An option of the config file is named by its variable only: its value is a secret."""
    argv = list(instance.get("argv", []))
    blamed = blame(argv, list(instance.get("argv_from", [])), error)
    unit = instance.get("unit") or instance.get("name")
    where = "; ".join(f"{var} = {json.dumps(args)}" for var, args in blamed)
    match = _ARGUMENT.match(error)
    if not where and match:
        named = set(match.group(1).split("/"))
        where = "; ".join(
            f"{var} (in the --config file; value hidden)"
            for key, var in (config_vars or {}).items()
            if f"--{key}" in named
        )
    where = where or f"the arguments of {instance.get('name')}"
    return (
        f"{where} ({unit}): SGLang's own parser refuses them: {error}. "
        "Nothing was written or restarted. Fix: correct the variable named here "
        "(`python -m sglang.launch_server --help` in the serving venv lists the options)"
    )


def verdict_key(params: dict[str, Any]) -> str:
    """Hash of what the parser's verdict depends on: the arguments, the config options and the
    release (the venv's real path names it: /opt/sglang/venvs/<version>-<digest>)."""
    release = os.path.realpath(os.path.dirname(os.path.dirname(params["python"])))
    payload = {
        "release": release,
        "argv": [[str(a) for a in i.get("argv", [])] for i in params["instances"]],
        "config": params.get("config") or {},
    }
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()


def cached_verdict(params: dict[str, Any]) -> dict[str, Any] | None:
    return json_cache.read(params.get("cache_dir") or "", verdict_key(params))


def keep_verdict(params: dict[str, Any], result: dict[str, Any]) -> None:
    if not result.get("failed"):  # a refusal is never kept: it must be checked again
        json_cache.keep(params.get("cache_dir") or "", verdict_key(params),
                        {"results": result["results"], "msg": result["msg"]})


def run_check(params: dict[str, Any]) -> dict[str, Any]:
    instances = params["instances"]
    payload = {
        "instances": [
            {"name": i["name"], "argv": [str(a) for a in i.get("argv", [])]} for i in instances
        ],
        "config": params["config"] or {},
    }
    started = time.monotonic()
    try:
        done = subprocess.run(
            [params["python"], "-c", PARSE_SCRIPT],
            input=json.dumps(payload),
            capture_output=True,
            text=True,
            timeout=params["timeout"],
            check=False,
            cwd="/",
        )
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {
            "failed": True,
            "msg": f"cannot run SGLang's parser with {params['python']}: {exc}",
            "results": [],
            "seconds": round(time.monotonic() - started, 2),
        }
    seconds = round(time.monotonic() - started, 2)
    lines = done.stdout.strip().splitlines()
    try:
        report = json.loads(lines[-1]) if done.returncode == 0 and lines else None
    except ValueError:
        report = None
    if report is None:
        tail = (done.stderr.strip().splitlines() or ["no output"])[-1]
        return {
            "failed": True,
            "msg": f"cannot run SGLang's parser with {params['python']} (rc {done.returncode}): "
            f"{tail}",
            "results": [],
            "seconds": seconds,
        }
    by_name = {i["name"]: i for i in instances}
    refused = [r for r in report["results"] if not r.get("ok")]
    result: dict[str, Any] = {
        "changed": False,
        "results": report["results"],
        "import_seconds": report.get("import_seconds"),
        "cpu_seconds": report.get("cpu_seconds"),
        "seconds": seconds,
    }
    if refused:
        result["failed"] = True
        result["msg"] = "\n".join(
            refusal_message(by_name[r["name"]], r.get("error", ""), params.get("config_vars"))
            for r in refused
        )
    else:
        result["msg"] = f"SGLang's parser accepts the arguments of {len(instances)} instance(s)"
    return result


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "python": {"type": "path", "required": True},
            "instances": {"type": "list", "elements": "dict", "required": True},
            "config": {"type": "dict", "default": {}, "no_log": True},
            "config_vars": {"type": "dict", "default": {}},
            "cache_dir": {"type": "path", "default": ""},
            "timeout": {"type": "float", "default": 120.0},
        },
        supports_check_mode=True,
    )
    if module.check_mode and not os.path.exists(module.params["python"]):
        # a check run on a new host: the stack play ran in check mode too, nothing installed
        module.exit_json(
            changed=False,
            skipped=True,
            results=[],
            seconds=0.0,
            msg=f"{module.params['python']} is not there yet (check mode): arguments not parsed",
        )
    started = time.monotonic()
    kept = cached_verdict(module.params)
    if kept is not None:
        module.exit_json(changed=False, cached=True, results=kept["results"],
                         msg=kept["msg"] + " (cached verdict: same arguments, same release)",
                         seconds=round(time.monotonic() - started, 3))
    result = run_check(module.params)
    result["cached"] = False
    keep_verdict(module.params, result)
    if result.pop("failed", False):
        module.fail_json(**result)
    module.exit_json(**result)


if __name__ == "__main__":
    main()
