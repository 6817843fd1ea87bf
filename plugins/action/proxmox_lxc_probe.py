"""Action plugin proxmox_lxc_probe: the whole state of a Proxmox node's containers, in one read.

The proxmox_lxc role's single probe. On the controller it merges each container spec over the
defaults and checks the specs (rejected before anything runs on the node); then it runs ONE
shell command on the node (no Python module shipped) that prints the node's NVIDIA majors and
device nodes, its OS templates, the host directories of the mounts, each container's config
(read from the config folder, through ``pct config`` where a file cannot be read) and, from one
``pct exec`` per existing container (all at once), whether it runs, has booted, and has python3,
a running sshd, the controller's key and an address. From that it works out, per container, the
concerns that drifted from the spec (``drift``) and what needs the node's state (templates,
container ids held by others, GPU indexes), listed as problems before any change.

Read-only: it runs in check mode too and never reports a change. Pure logic (``probe_script``,
``parse_sections``, ``plan_container``) is unit-tested in tests/unit/proxmox_lxc/test_probe.py.
"""

from __future__ import annotations

import shlex

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import lxc_spec as _spec
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import pct_config as _pct
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.lxc_gpu_passthrough import (
    nvidia_gpu_indexes,
    nvidia_owned_lines,
    nvidia_passthrough,
)

MARK = "## "
# What one pct exec asks a running container (one line per answer).
_INSIDE = (
    "command -v python3 >/dev/null && echo python3; "
    "test -x /usr/sbin/sshd && echo sshd; "
    "systemctl is-active --quiet ssh && echo sshd-active; "
    "{key_check}"
    "echo \"system $(systemctl is-system-running 2>/dev/null)\"; "
    "echo \"addr $(hostname -I 2>/dev/null)\"; true"
)
BOOTED = ("running", "degraded")
# concerns, in the order the role converges them
CONCERNS = ("recreate", "create", "clone", "mounts", "config", "passthrough", "start", "boot",
            "bootstrap")


def template_file(template: str) -> str:
    """`local:vztmpl/debian.tar.zst` -> `debian.tar.zst` (the file in the template folder)."""
    return str(template).split(":vztmpl/", 1)[-1] if ":vztmpl/" in str(template) else str(template)


def read_config(vmid: str) -> list[str]:
    """Shell lines that print a container's config as section '## config <vmid>': the file's
    main section when the node's config folder is readable, else what `pct config` says."""
    return [
        f'if [ -r "$configs/{vmid}.conf" ]; then',
        f"  echo '## config {vmid}'; sed '/^\\[/,$d' \"$configs/{vmid}.conf\"",
        f'elif out="$("$pct" config {vmid} 2>/dev/null)"; then',
        f"  echo '## config {vmid}'; printf '%s\\n' \"$out\"",
        "fi",
    ]


def probe_script(containers: list[dict], pct: str, config_dir: str, template_dir: str,
                 ssh_public_key: str = "") -> str:
    """The shell command that reads the node; sections start with ``## <title>``."""
    q = shlex.quote
    key = (ssh_public_key or "").strip()
    key_check = (f"grep -qxF -- {q(key)} /root/.ssh/authorized_keys 2>/dev/null && echo key; "
                 if key else "")
    inside = q(_INSIDE.format(key_check=key_check))
    paths = sorted({str(m["host_path"]) for ct in containers for m in ct.get("mounts") or []})
    lines = [
        "set -u",
        f"pct={q(pct)}; configs={q(config_dir)}",
        'tmp="$(mktemp -d)" || exit 3',
        "trap 'rm -rf \"$tmp\"' EXIT",
        "echo '## devices'; cat /proc/devices 2>/dev/null",
        "echo '## nodes'; ls -1d /dev/nvidia* 2>/dev/null",
        f"echo '## templates'; ls -1 {q(template_dir)} 2>/dev/null",
        "echo '## paths'",
    ]
    for path in paths:
        lines.append(f"[ -d {q(path)} ] && printf '%s\\t%s\\n' {q(path)} "
                     f"\"$(stat -c '%a %U' -- {q(path)})\"")
    # the templates that specs clone from: their configs only (a template never runs)
    sources = sorted({str(int(ct["clone_from"])) for ct in containers
                      if ct.get("clone_from") is not None} - {str(int(ct["vmid"]))
                                                              for ct in containers})
    for vmid in sources:
        lines += [*read_config(vmid), "unset out"]
    for vmid in sorted({str(int(ct["vmid"])) for ct in containers}):
        lines += [
            *read_config(vmid),
            f'if [ -e "$configs/{vmid}.conf" ] || [ -n "${{out:-}}" ]; then',
            f'  {{ "$pct" exec {vmid} -- sh -c {inside} 2>/dev/null && echo "exec ok" '
            f'|| "$pct" status {vmid} 2>&1; }} > "$tmp/{vmid}" &',
            "fi",
            "unset out",
        ]
    lines.append("wait")
    for vmid in sorted({str(int(ct["vmid"])) for ct in containers}):
        lines.append(f'[ -f "$tmp/{vmid}" ] && {{ echo \'## inside {vmid}\'; cat "$tmp/{vmid}"; }}')
    lines.append("true")
    return "\n".join(lines) + "\n"


def parse_sections(text: str) -> dict[str, str]:
    sections: dict[str, list[str]] = {}
    current = None
    for line in (text or "").splitlines():
        if line.startswith(MARK):
            current = line[len(MARK):].strip()
            sections[current] = []
        elif current is not None:
            sections[current].append(line)
    return {k: "\n".join(v) for k, v in sections.items()}


def parse_inside(text: str) -> dict:
    """What one container answered: running, booted, python3, sshd, key, addresses."""
    lines = (text or "").splitlines()
    state = {"running": "exec ok" in lines, "python3": "python3" in lines,
             "sshd": "sshd" in lines, "sshd_active": "sshd-active" in lines,
             "key": "key" in lines, "system": "", "addresses": [], "status": ""}
    for line in lines:
        if line.startswith("system "):
            state["system"] = line[len("system "):].strip()
        elif line.startswith("addr "):
            state["addresses"] = line[len("addr "):].split()
        elif line.startswith("status:"):
            state["status"] = line.split(":", 1)[1].strip()
    if state["running"]:
        state["status"] = "running"
    return state


def node_facts(sections: dict[str, str]) -> dict:
    nodes = [n for n in sections.get("nodes", "").splitlines() if n.strip()]
    paths: dict[str, tuple[str, str]] = {}  # host path -> (octal mode, owner)
    for line in sections.get("paths", "").splitlines():
        path, _tab, mode_owner = line.rpartition("\t")
        mode, _space, owner = mode_owner.partition(" ")
        if path:
            paths[path] = (mode, owner)
    return {
        "devices": sections.get("devices", ""),
        "nodes": nodes,
        "gpu_indexes": nvidia_gpu_indexes(nodes),
        "templates": [t for t in sections.get("templates", "").splitlines() if t.strip()],
        "paths": paths,
    }


def _clone_problems(ct: dict, source: dict | None, host: str) -> list[str]:
    """The template a container is cloned from is on this node, and is a template."""
    where = f"proxmox_lxc_containers[{ct['name']}].clone_from"
    if source is None:
        return [f"{where}: CT {ct['clone_from']} does not exist on {host} (a template is cloned "
                "on its own node); make the template there, or name one this node has"]
    if source.get("options", {}).get("template") != "1":
        return [f"{where}: CT {ct['clone_from']} on {host} is not a template; make it one "
                "first (the proxmox_lxc role's template tasks, i.e. `pct template "
                f"{ct['clone_from']}` after a shutdown)"]
    return []


def clone_config(source: dict, ct: dict) -> dict:
    """What a fresh clone's config reads like: the template's, with the spec's hostname."""
    options = {k: v for k, v in source.get("options", {}).items() if k != "template"}
    options["hostname"] = str(ct["hostname"])
    return {**source, "options": options}


def _node_problems(ct: dict, exists: bool, config: dict, node: dict, host: str,
                   template_dir: str, recreate: list, source: dict | None = None) -> list[str]:
    """The checks that need the node's state (same messages as the role's asserts had)."""
    problems = []
    name = ct["name"]
    if config.get("options", {}).get("template") == "1":
        problems.append(
            f"proxmox_lxc_containers[{name}].vmid: CT {ct['vmid']} on {host} is a template "
            "(it cannot be started); give this container another vmid, and clone it from the "
            f"template with clone_from: {ct['vmid']}")
        return problems
    if ct.get("clone_from") is not None:
        if not exists or name in recreate:
            problems += _clone_problems(ct, source, host)
    elif ((not exists or name in recreate)
          and template_file(ct["template"]) not in node["templates"]):
        tfile = template_file(ct["template"])
        problems.append(
            f"proxmox_lxc_containers[{name}].template: {ct['template']} not found on {host} "
            f"({template_dir}/{tfile}); download it with `pveam download local {tfile}` "
            "(lab: `sglang-lxc lab up`)")
    held_by = config.get("options", {}).get("hostname", "")
    if exists and held_by != ct["hostname"] and name not in recreate:
        problems.append(
            f"proxmox_lxc_containers[{name}].vmid: CT {ct['vmid']} on {host} is "
            f"\"{held_by or '?'}\", not {ct['hostname']}; pick another vmid, or list {name} "
            "in proxmox_lxc_recreate")
    indexes = node["gpu_indexes"]
    gpus = ct.get("gpus")
    if isinstance(gpus, list) and (indexes or ct.get("gpu_required")):
        missing = [g for g in gpus if g not in indexes]
        if missing:
            problems.append(
                f"proxmox_lxc_containers[{name}].gpus: GPU {', '.join(map(str, missing))} not on "
                f"{host} (it has: {', '.join(map(str, indexes)) or 'no GPU'})")
    if ct.get("gpu_required") and not indexes:
        problems.append(
            f"proxmox_lxc_containers[{name}].gpu_required: {host} has no NVIDIA GPU (no "
            "/dev/nvidia<N>); load the driver on the node or set gpu_required: false")
    return problems


def plan_container(ct: dict, sections: dict[str, str], node: dict, host: str,
                   template_dir: str, recreate: list, ssh_public_key: str = "",
                   bootstrap: bool = True) -> dict:
    """Drift per concern for one merged container spec, and the problems found."""
    vmid = str(int(ct["vmid"]))
    exists = f"config {vmid}" in sections
    config = _pct.pve_conf_parse(sections.get(f"config {vmid}", ""))
    inside = parse_inside(sections.get(f"inside {vmid}", ""))
    cloning = ct.get("clone_from") is not None and (not exists or ct["name"] in recreate)
    src = f"config {int(ct['clone_from'])}" if cloning else ""
    source = _pct.pve_conf_parse(sections[src]) if src in sections else None
    problems = _node_problems(ct, exists, config, node, host, template_dir, recreate, source)
    gpus = ct.get("gpus") if node["gpu_indexes"] else "none"
    try:
        want_lines = nvidia_passthrough(node["devices"], node["nodes"], gpus)
    except ValueError:
        want_lines = []  # reported above as a problem
    drift: list[str] = []
    if exists and ct["name"] in recreate:
        drift.append("recreate")
    if cloning:  # created, or recreated, by pct clone
        drift.append("clone")
    elif not exists:
        drift.append("create")
    for mount in ct.get("mounts") or []:
        have = node["paths"].get(str(mount["host_path"]))
        owner = mount.get("owner")
        # its mode is the container's business once it exists (roles inside may set it)
        if have is None or (owner and str(owner) != have[1]):
            drift.append("mounts")
            break
    set_args: list[str] = []
    have_lines = [f"{k}: {v}" for k, v in config.get("lxc", [])]
    if exists:
        set_args = _pct.pct_set_args(ct, config)
        if set_args:
            drift.append("config")
        owned = nvidia_owned_lines(config, node["devices"])
        if [x for x in owned if x not in want_lines] or [x for x in want_lines
                                                         if x not in have_lines]:
            drift.append("passthrough")
        if not inside["running"]:
            drift.append("start")
        elif inside["system"] not in BOOTED:
            drift.append("boot")
        elif bootstrap and not (inside["python3"] and inside["sshd"] and inside["sshd_active"]
                                and (inside["key"] or not (ssh_public_key or "").strip())):
            drift.append("bootstrap")
    elif want_lines:
        drift.append("passthrough")
    address = None
    if ct.get("ip") == "dhcp":
        address = inside["addresses"][0] if inside["addresses"] else None
        if address is None and exists and "start" not in drift:
            drift.append("boot")  # running without an address yet: wait for it
    else:
        address = str(ct["ip"]).split("/", maxsplit=1)[0]
    return {
        "name": ct["name"],
        "vmid": int(ct["vmid"]),
        "exists": exists,
        "config": config,
        "status": inside["status"] or ("stopped" if exists else "absent"),
        "system": inside["system"],
        "address": address,
        "set_args": set_args,
        "clone_config": clone_config(source, ct) if source else None,
        "drift": sorted(set(drift), key=CONCERNS.index),
        "problems": problems,
        "spec": ct,
    }


def spec_errors(containers: list, defaults: dict, host: str, memory_floor,
                boot_timeout, shutdown_timeout) -> tuple[list[dict], list[str]]:
    merged = _spec.lxc_with_defaults(containers, defaults)
    errors = _spec.lxc_container_errors(merged, host, int(memory_floor))
    try:
        timeouts_ok = int(boot_timeout) > 0 and int(shutdown_timeout) > 0
    except (TypeError, ValueError):
        timeouts_ok = False
    if not timeouts_ok:
        errors.append("proxmox_lxc_boot_timeout and proxmox_lxc_shutdown_timeout must be > 0 "
                      f"on {host}")
    return merged, errors


class ActionModule(ActionBase):
    _supports_check_mode = True
    TRANSFERS_FILES = False
    _VALID_ARGS = frozenset((
        "containers", "defaults", "pct", "config_dir", "template_dir", "recreate",
        "ssh_public_key", "bootstrap", "memory_floor", "boot_timeout", "shutdown_timeout",
    ))

    def run(self, tmp=None, task_vars=None):
        result = super().run(tmp, task_vars)
        args = self._task.args
        host = (task_vars or {}).get("inventory_hostname", "?")
        merged, errors = spec_errors(
            args.get("containers") or [], args.get("defaults") or {}, host,
            args.get("memory_floor", 512), args.get("boot_timeout", 120),
            args.get("shutdown_timeout", 180))
        if errors:
            return {**result, "failed": True, "msg": "; ".join(errors), "problems": errors,
                    "changed": False}
        recreate = list(args.get("recreate") or [])
        key = str(args.get("ssh_public_key") or "")
        template_dir = str(args["template_dir"])
        script = probe_script(merged, str(args["pct"]), str(args["config_dir"]), template_dir,
                              key)
        res = self._low_level_execute_command(f"/bin/bash -c {shlex.quote(script)}")
        if res.get("rc") != 0:
            raise AnsibleActionFail(f"reading the containers of {host} failed "
                                    f"(rc {res.get('rc')}): {res.get('stderr', '')[-500:]}")
        sections = parse_sections(res.get("stdout", ""))
        node = node_facts(sections)
        planned = [plan_container(ct, sections, node, host, template_dir, recreate, key,
                                  bool(args.get("bootstrap", True))) for ct in merged]
        problems = [p for ct in planned for p in ct["problems"]]
        result.update(
            changed=False,
            containers=planned,
            drifted=[ct["name"] for ct in planned if ct["drift"]],
            devices=node["devices"],
            nodes=node["nodes"],
            gpu_indexes=node["gpu_indexes"],
            problems=problems,
        )
        if problems:
            result.update(failed=True, msg="\n".join(problems))
        return result
