"""Action plugin ``sglang_lxc_validate``: one validation pass over every input of a run.

``playbooks/validate.yml`` calls it once (run_once) after reading each Proxmox node's state
(cores, memory, GPUs, bridges, templates, containers through ``pct``). It never changes anything
and never fails by itself: it returns ``problems``, one line each, that start with the host, the
variable and its value and end with the fix. The play then prints them with one
``ansible.builtin.fail``.

What it checks:

- unknown role-prefixed variables (inventory and extra vars), with "did you mean";
- every role variable set on a host against its role's ``argument_specs`` (type, choices),
  including unknown keys inside nested entries (container specs, mounts, instances);
- the container specs of every node (``lxc_container_errors``) and against the live node:
  cores, memory, GPU indexes, the bridge's subnet, the OS template, and vmids, hostnames and
  addresses already used by other containers there;
- the serving instance expansion (``sglang_serve_instances``), the router, the drain settings;
- whether each instance's model fits the memory it may use (``validate_fit``): the weights and
  the GPU memory come from the node read; called with ``plan: true`` first (before that read),
  it only returns the model folders each node should weigh (``folders``);
- on a node whose GPUs report compute capability 12.x (SM120), the serving options with no SM120
  path in the locked stack (``validate_sm120``, the table roles/sglang_serve/files/
  sm120_refusals.yml);
- the PCIe fabric of every tensor-parallel group (``validate_fabric``): P2P, common ancestor,
  IOMMU and ACS, read on the node; a finding for each group, the fix with its cost where P2P is
  at risk, and the NCCL environment chosen from it (``fabric_env``: host -> instance -> env,
  which the serve play reads from this task's registered result, ``__validate``);
- the controller: the SSH public key to install, the wheelhouse's free space, tools on PATH.

The checks are plain functions in plugins/plugin_utils/validate_*.py, one module per concern
(unit-tested in tests/unit/validate); ``ActionModule`` only
gathers the values.
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from ansible.plugins.action import ActionBase
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_common import (
    ROLE_PREFIXES,
    SERVING_ROLES,
    UNSET,
    int_or_none,
    is_runtime_undefined,
    problem,
    spec_problems,
    template_error_problem,
    unknown_variable_problems,
    unknown_variables_by_host,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_containers import (
    clone_problems,
    container_problems,
    cross_node_problems,
    parse_node_state,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_controller import (
    controller_problems,
    unreachable_reason,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_declared import (
    ROLES_DIR,
    declared_names,
    play_role_vars,
    role_defaults,
    role_specs,
    role_vars,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_fabric import (
    fabric_findings,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_fit import (
    fit_problems,
    node_folders,
    parse_fit,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_router import (
    router_problems,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_serving import (
    drain_problems,
    missing_play_vars,
    play_level_problems,
    required_play_vars,
    serve_problems,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_sm120 import (
    sm120_problems,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_stack import (
    stack_problems,
)

# The plan's GPU count where the inventory gives none (the node's GPUs are read after it).
MAX_GPUS = 64


def _with_role_path(value: Any, path: Path) -> Any:
    """``role_path`` as Ansible sets it inside the role (the env here spans several roles)."""
    if isinstance(value, str):
        return value.replace("{{ role_path }}", str(path))
    if isinstance(value, Mapping):
        return {k: _with_role_path(v, path) for k, v in value.items()}
    if isinstance(value, list):
        return [_with_role_path(v, path) for v in value]
    return value


def _trusted(value: Any) -> Any:  # pragma: no cover - needs ansible-core
    """Role files read here are the project's own: mark their strings as templates (2.19)."""
    from ansible.template import trust_as_template

    if isinstance(value, str):
        return trust_as_template(value)
    if isinstance(value, Mapping):
        return {k: _trusted(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_trusted(v) for v in value]
    return value


class ActionModule(ActionBase):
    """Collects every problem of the run's inputs; changes nothing."""

    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp=None, task_vars=None):  # pragma: no cover - exercised through the lab
        started = time.monotonic()
        result = super().run(tmp, task_vars)
        result["changed"] = False
        args = self._task.args
        hostvars = task_vars["hostvars"]
        if args.get("plan"):
            result["folders"] = self._plan(hostvars, task_vars.get("groups", {}))
            result["elapsed_s"] = round(time.monotonic() - started, 2)
            return result
        node_states: Mapping[str, Any] = args.get("node_states") or {}
        groups = task_vars.get("groups", {})
        nodes = list(groups.get("proxmox_nodes", []))
        servers = list(groups.get("sglang_servers", []))
        specs = role_specs()
        defaults = role_defaults()
        rvars = role_vars()
        pvars = play_role_vars()
        required = required_play_vars(pvars)
        declared = declared_names()
        problems: list[str] = []
        key_errors: dict[str, str] = {}
        containers_by_name: dict[str, dict] = {}
        fits: dict[str, dict] = {}
        notes: list[str] = []
        warnings: list[str] = []
        states: dict[str, Any] = {}
        merged_by_node: dict[str, list] = {}
        fabric_env: dict[str, dict] = {}
        ssh_hosts = False

        names_by_host: dict[str, list[str]] = {}
        for host in sorted(set(groups.get("all", [])) | set(nodes)):
            raw = hostvars.raw_get(host)
            names_by_host[host] = [n for n in raw if isinstance(n, str)]
            if raw.get("ansible_connection", "ssh") in ("ssh", "paramiko", "smart"):
                ssh_hosts = ssh_hosts or host != "localhost"
        problems += unknown_variables_by_host(names_by_host, declared)

        for node in nodes:
            values, errors = self._values(hostvars, node, ("proxmox_lxc",), defaults, rvars, pvars)
            for var, error in errors.items():
                if var == "proxmox_lxc_ssh_public_key":
                    key_errors[node] = str(error).strip().splitlines()[0]
                else:
                    problems.append(template_error_problem(node, var, error))
            problems += self._typed(
                node,
                values,
                hostvars.raw_get(node),
                specs["proxmox_lxc"],
                skip=("proxmox_lxc_containers", "proxmox_lxc_container_defaults"),
            )
            reg = node_states.get(node) or {}
            state = None
            if reg.get("unreachable"):
                problems.append(
                    problem(
                        node,
                        "ansible_host",
                        hostvars.raw_get(node).get("ansible_host", node),
                        f"unreachable: {unreachable_reason(reg)}",
                        "check the address, the SSH key and that the node is up",
                    )
                )
            elif reg.get("rc", 0) != 0 or reg.get("failed"):
                problems.append(
                    problem(
                        node,
                        "proxmox_lxc_pct",
                        values.get("proxmox_lxc_pct"),
                        "reading the node's containers failed: "
                        + (reg.get("stderr") or reg.get("msg") or "").strip()[:200],
                        f"check that {values.get('proxmox_lxc_pct')} runs on {node}",
                    )
                )
            elif reg:
                state = parse_node_state(reg.get("stdout", ""))
                state["templates_dir"] = values.get("proxmox_lxc_template_dir")
                fits[node] = parse_fit(state.get("fit"))
            recreate = values.get("proxmox_lxc_recreate") or []
            found, merged = container_problems(
                node,
                values.get("proxmox_lxc_containers", []),
                values.get("proxmox_lxc_container_defaults", {}),
                state,
                values.get("proxmox_lxc_memory_floor", 512),
                recreate if isinstance(recreate, list) else [],
                specs["proxmox_lxc"]["proxmox_lxc_containers"].get("options"),
            )
            problems += found
            states[node], merged_by_node[node] = state, merged
            for ct in merged:
                gpus = ct.get("gpus")
                count = None
                if gpus == "all" and state is not None:
                    count = len(state["gpus"])
                elif isinstance(gpus, list):
                    count = len(gpus)
                containers_by_name[str(ct.get("name"))] = {
                    "node": node,
                    "gpu_count": count,
                    "spec": ct,
                }
                for var in (
                    (ct.get("host_vars") or {}) if isinstance(ct.get("host_vars"), Mapping) else {}
                ):
                    problems += unknown_variable_problems(
                        f"{ct.get('name')} (host_vars on {node})", [var], declared
                    )

        if not nodes:
            problems.append(problem(
                "inventory", "proxmox_nodes", UNSET, "the group is empty",
                "add the Proxmox host(s) under the group proxmox_nodes",
            ))
        all_containers = [c["spec"] for c in containers_by_name.values()]
        recreate_all = task_vars.get("proxmox_lxc_recreate") or []
        problems += cross_node_problems(
            nodes, all_containers, recreate_all if isinstance(recreate_all, list) else []
        )
        problems += clone_problems(
            states, merged_by_node, recreate_all if isinstance(recreate_all, list) else []
        )
        if not servers and not all_containers:
            problems.append(
                problem(
                    "inventory",
                    "sglang_servers",
                    UNSET,
                    "no container in group sglang_servers and none in proxmox_lxc_containers",
                    "add the serving containers",
                )
            )

        for host in servers:
            values, errors = self._values(hostvars, host, SERVING_ROLES, defaults, rvars, pvars)
            raw = hostvars.raw_get(host)
            for var, error in errors.items():
                if var in raw:
                    problems.append(template_error_problem(host, var, error))
            for role in SERVING_ROLES:
                problems += self._typed(
                    host, values, raw, specs.get(role, {}), skip=("sglang_serve_instances",)
                )
            expected = values.get("sglang_lxc_gpus_expected")
            ct = containers_by_name.get(host)
            gpu_count = (
                ct["gpu_count"]
                if ct and ct["gpu_count"] is not None
                else int_or_none(expected)
            )
            found, instances = serve_problems(host, values, gpu_count)
            problems += found
            given = int_or_none(values.get("sglang_serve_gpu_count"))
            found, warned, noted = fit_problems(
                host, instances, ct, fits.get(ct["node"]) if ct else None,
                gpu_count if given is None else given,
                device=values.get("sglang_serve_device", "cuda"),
                cpu_instance_mib=values.get("sglang_serve_cpu_instance_mib", 3072),
            )
            problems += found
            warnings += warned
            notes += warned + [f"{host}: {line}" for line in noted]
            fit = fits.get(ct["node"]) if ct else None
            found, noted = sm120_problems(host, instances, values, ct, fit)
            problems += found
            notes += [f"{host}: {line}" for line in noted]
            warned, noted, chosen = fabric_findings(host, instances, values, ct, fit)
            warnings += warned
            notes += [f"{host}: {line}" for line in noted]
            if chosen:
                fabric_env[host] = chosen
            problems += router_problems(host, values, instances)
            problems += drain_problems(host, values)
            problems += play_level_problems(host, values)
            problems += missing_play_vars(host, values, required)
            problems += stack_problems(host, values)

        wheelhouse = None
        if servers:
            wv, _errors = self._values(hostvars, servers[0], (), defaults, rvars, pvars)
            wheelhouse = wv.get("sglang_lxc_wheelhouse")
        problems += controller_problems(
            key_errors, wheelhouse if isinstance(wheelhouse, str) else None, need_ssh=ssh_hosts
        )
        result["problems"] = problems
        result["notes"] = notes
        result["fabric_env"] = fabric_env
        if warnings:
            result["warnings"] = warnings
        result["elapsed_s"] = round(time.monotonic() - started, 2)
        result["checked"] = {"nodes": nodes, "servers": servers}
        if problems:  # the run stops here, before any change (one task, no separate fail)
            result["failed"] = True
            result["msg"] = (f"{chr(10).join(problems)}\n({len(problems)} problem(s); "
                             "nothing was changed)")
        return result

    def _plan(self, hostvars, groups):  # pragma: no cover - exercised through the lab
        """The model folders, as each node sees them, that its serving containers will load:
        what the node read weighs for the fit check (before the node's GPUs are known, a GPU
        count not given in the inventory counts as MAX_GPUS: only the folders matter here)."""
        defaults, rvars, pvars = role_defaults(), role_vars(), play_role_vars()
        containers: dict[str, dict] = {}
        folders: dict[str, list[str]] = {}
        for node in groups.get("proxmox_nodes", []):
            folders[node] = []
            values, _errors = self._values(hostvars, node, ("proxmox_lxc",), defaults, rvars,
                                           pvars)
            _found, merged = container_problems(
                node, values.get("proxmox_lxc_containers", []),
                values.get("proxmox_lxc_container_defaults", {}), None,
                values.get("proxmox_lxc_memory_floor", 512),
            )
            for ct in merged:
                containers[str(ct.get("name"))] = {"node": node, "spec": ct}
        for host in groups.get("sglang_servers", []):
            ct = containers.get(host)
            if ct is None:
                continue
            values, _errors = self._values(hostvars, host, ("sglang_serve",), defaults, rvars,
                                           pvars)
            gpus = ct["spec"].get("gpus")
            count = len(gpus) if isinstance(gpus, list) else int_or_none(
                values.get("sglang_lxc_gpus_expected"))
            _found, instances = serve_problems(host, values, MAX_GPUS if count is None else count)
            for folder in node_folders(instances, ct["spec"].get("mounts")):
                if folder not in folders[ct["node"]]:
                    folders[ct["node"]].append(folder)
        return folders

    def _values(self, hostvars, host, roles, defaults, rvars, pvars):  # pragma: no cover
        """Each variable of ``roles`` as the role will see it on ``host``, templated."""
        raw = dict(hostvars.raw_get(host))
        env: dict[str, Any] = {}
        for role in roles:
            env.update(_trusted(_with_role_path(defaults.get(role) or {}, ROLES_DIR / role)))
        env.update(raw)
        for role in roles:
            env.update(_trusted(rvars.get(role) or {}))
            env.update(_trusted(pvars.get(role) or {}))
        templar = self._templar.copy_with_new_env(available_variables=env)
        values: dict[str, Any] = {}
        errors: dict[str, BaseException] = {}
        wanted = [k for k in env if isinstance(k, str) and (k.startswith(ROLE_PREFIXES))]
        for name in wanted:
            try:
                values[name] = templar.template(env[name])
            except Exception as exc:  # any templating error is reported ...
                if not is_runtime_undefined(exc):  # ... but facts only known later
                    errors[name] = exc
        return values, errors

    @staticmethod
    def _typed(host, values, raw, options, skip=()):  # pragma: no cover
        out = []
        for name, spec in options.items():
            if name in raw and name not in skip and name in values:
                out += spec_problems(host, name, values[name], spec or {})
        return out
