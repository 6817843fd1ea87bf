# Copyright: sglang-lxc contributors
# Apache-2.0
"""Read a host's state for a role in one pass and say, per concern, what drifted (read-only).

A role hands the probe its concerns in order, each a set of checks of the kinds below; the
probe answers ``drift`` (concern -> reasons, one line each) and ``drifted`` (the concern names
with a reason, in the role's order). The role then includes the tasks of those concerns only.
Nothing here writes anything.

Check kinds (keys of a concern):

- ``paths``: ``{path, state, mode, owner, group, target}``; state is ``directory``, ``file``,
  ``link`` (``target``: what the link must read), ``absent`` or ``exists``.
- ``files``: ``{path, sha1, mode, owner, group}``: a regular file whose content has this sha1
  (the controller renders the content and hashes it, so no content crosses the wire).
- ``records``: ``{path, equal, ignore, mode, owner, group}``: a JSON file whose object, less the
  keys in ``ignore``, equals ``equal``.
- ``debs``: Debian package names that dpkg must list as installed.
- ``dists``: ``{path, requirements}``: distributions installed in a folder of importable
  packages (a venv's site-packages), by exact version (``importlib.metadata``); ``path`` may name
  a venv, whose ``lib/python*/site-packages`` is read.
- ``strays``: ``{path, pattern, keep}``: entries of a folder matching ``pattern`` (a regex) other
  than ``keep`` must not exist.
- ``python_headers``: interpreters whose ``Python.h`` must exist.
- ``cuda_links``: ``{cuda_home, cccl_headers, lib64, unversioned_libs, libcuda_stub}``: the plan
  of module cuda_toolkit_links must be empty.
- ``groups``: group names that must exist; ``users``: ``{name, group, home, shell}`` accounts
  that must exist with those (keys left out are not checked).
- ``services``: ``{name, enabled, active}``: systemd units enabled and running (one
  ``systemctl show`` for all of them).

Besides drift, ``stats`` reports what a task needs to know of a few paths, and ``http`` answers a
few GETs on the host's loopback (``{url, timeout}`` -> ``{status, json, msg}``): a role's
readiness can then take a converged host's answer from its probe instead of a task of its own.

A concern with ``enabled: false`` is neither read nor reported; ``follows: [names]`` makes a
concern drift whenever one of those did (a new release needs its links and switch).
"""

from __future__ import annotations

import glob
import grp
import hashlib
import json
import os
import pwd
import re
import stat
import subprocess
import sys
import sysconfig
from collections.abc import Callable
from typing import Any

try:  # the probe runs under the host's Python 3 (3.8+ has importlib.metadata)
    from importlib import metadata as importlib_metadata
except ImportError:  # pragma: no cover
    importlib_metadata = None

from ansible_collections.sglang_lxc.serving.plugins.module_utils.cuda_links import (
    driver_libcuda,
    plan_tree,
)

DPKG_STATUS = "/var/lib/dpkg/status"
STATE_TYPES = {
    "directory": stat.S_ISDIR,
    "file": stat.S_ISREG,
    "link": stat.S_ISLNK,
}


def _name(value: Any) -> str:
    return str(value)


def _owner_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return str(uid)


def _group_name(gid: int) -> str:
    try:
        return grp.getgrgid(gid).gr_name
    except KeyError:
        return str(gid)


def _mode(value: Any) -> int | None:
    if value in (None, ""):
        return None
    if isinstance(value, int):
        return value
    return int(str(value), 8)


def check_attrs(path: str, st: os.stat_result, spec: dict) -> list[str]:
    """Mode, owner and group of ``path`` against ``spec`` (keys left out are not checked)."""
    reasons = []
    mode = _mode(spec.get("mode"))
    if mode is not None and stat.S_IMODE(st.st_mode) != mode:
        reasons.append(f"{path}: mode {stat.S_IMODE(st.st_mode):04o}, want {mode:04o}")
    owner = spec.get("owner")
    if owner not in (None, "") and _name(owner) not in (_owner_name(st.st_uid), str(st.st_uid)):
        reasons.append(f"{path}: owner {_owner_name(st.st_uid)}, want {owner}")
    group = spec.get("group")
    if group not in (None, "") and _name(group) not in (_group_name(st.st_gid), str(st.st_gid)):
        reasons.append(f"{path}: group {_group_name(st.st_gid)}, want {group}")
    return reasons


def check_path(spec: dict) -> list[str]:
    path = spec["path"]
    want = spec.get("state", "exists")
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return [] if want == "absent" else [f"{path}: missing"]
    except NotADirectoryError:
        return [] if want == "absent" else [f"{path}: missing (a parent is not a folder)"]
    if want == "absent":
        return [f"{path}: present, want absent"]
    if want == "link":
        if not stat.S_ISLNK(st.st_mode):
            return [f"{path}: not a link"]
        target = spec.get("target")
        current = os.readlink(path)
        if target not in (None, "") and current != target:
            return [f"{path}: links to {current}, want {target}"]
        return []
    if stat.S_ISLNK(st.st_mode):  # directory/file/exists follow a link, as the file module does
        try:
            st = os.stat(path)
        except OSError:
            return [f"{path}: dangling link"]
    if want in STATE_TYPES and not STATE_TYPES[want](st.st_mode):
        return [f"{path}: not a {want}"]
    return check_attrs(path, st, spec)


def sha1_of(path: str) -> str:
    digest = hashlib.sha1()  # what ansible's template/copy compare with
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 16), b""):
            digest.update(block)
    return digest.hexdigest()


def check_file(spec: dict) -> list[str]:
    path = spec["path"]
    reasons = check_path({**spec, "state": "file"})
    if reasons:
        return reasons
    want = spec.get("sha1")
    if want and sha1_of(path) != want:
        return [f"{path}: content differs"]
    return []


def check_record(spec: dict) -> tuple[list[str], Any]:
    """A JSON record: (reasons, the object read or None)."""
    path = spec["path"]
    reasons = check_path({**spec, "state": "file"})
    if reasons:
        return reasons, None
    try:
        with open(path, encoding="utf-8") as handle:
            current = json.load(handle)
    except (OSError, ValueError) as exc:
        return [f"{path}: not readable as JSON ({exc})"], None
    ignore = set(spec.get("ignore") or [])
    body = current
    if isinstance(current, dict):
        body = {k: v for k, v in current.items() if k not in ignore}
    if body != spec.get("equal"):
        return [f"{path}: record differs"], current
    return [], current


def installed_debs(status_path: str = DPKG_STATUS) -> set[str]:
    """Package names dpkg has in state ``installed`` (any architecture)."""
    installed = set()
    try:
        with open(status_path, encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return installed
    for stanza in text.split("\n\n"):
        package = status = None
        for line in stanza.splitlines():
            if line.startswith("Package:"):
                package = line.split(":", 1)[1].strip()
            elif line.startswith("Status:"):
                status = line.split(":", 1)[1].split()
        if package and status and status[-1] == "installed":
            installed.add(package)
    return installed


def check_debs(names: list[str], status_path: str = DPKG_STATUS) -> list[str]:
    installed = installed_debs(status_path)
    # "pkg:amd64" names an architecture; dpkg's status lists the bare name
    missing = [n for n in names if n.split(":", 1)[0] not in installed]
    return [f"Debian packages not installed: {', '.join(missing)}"] if missing else []


def canonical(name: str) -> str:
    """PEP 503 normalized project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def site_dirs(path: str) -> list[str]:
    """``path`` itself, or the site-packages of the venv at ``path``."""
    if os.path.isfile(os.path.join(path, "pyvenv.cfg")):
        return sorted(glob.glob(os.path.join(path, "lib", "python*", "site-packages")))
    return [path]


def installed_dists(path: str) -> dict[str, str]:
    found: dict[str, str] = {}
    if importlib_metadata is None:
        return found
    for dist in importlib_metadata.distributions(path=site_dirs(path)):
        name = dist.metadata["Name"] if dist.metadata else None
        if name:
            found.setdefault(canonical(name), dist.version)
    return found


def check_dists(spec: dict) -> list[str]:
    path = spec["path"]
    if not os.path.isdir(path):
        return [f"{path}: missing"]
    found = installed_dists(path)
    reasons = []
    for name, version in sorted((spec.get("requirements") or {}).items()):
        have = found.get(canonical(name))
        if have is None:
            reasons.append(f"{path}: {name} not installed, want {version}")
        elif have != str(version):
            reasons.append(f"{path}: {name} {have} installed, want {version}")
    return reasons


def check_strays(spec: dict) -> list[str]:
    path = spec["path"]
    try:
        entries = sorted(os.listdir(path))
    except OSError:
        return []
    pattern = re.compile(spec["pattern"])
    keep = set(spec.get("keep") or [])
    strays = [e for e in entries if pattern.search(e) and e not in keep]
    return [f"{path}: also holds {', '.join(strays)}"] if strays else []


Runner = Callable[[list[str]], "tuple[int, str]"]


def run(argv: list[str]) -> tuple[int, str]:
    try:
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=60, check=False)
    except OSError as exc:
        return 127, str(exc)
    return proc.returncode, proc.stdout


def python_header(python: str, runner: Runner = run) -> str:
    """Where ``python``'s Python.h must be (its sysconfig include folder)."""
    if os.path.realpath(python) == os.path.realpath(sys.executable):
        return os.path.join(sysconfig.get_paths()["include"], "Python.h")
    code = "import os, sysconfig; print(os.path.join(sysconfig.get_paths()['include'], 'Python.h'))"
    rc, out = runner([python, "-c", code])
    return out.strip() if rc == 0 else ""


def check_python_headers(pythons: list[str], runner: Runner = run) -> list[str]:
    reasons = []
    for python in pythons:
        header = python_header(python, runner)
        if not header:
            reasons.append(f"{python}: does not run")
        elif not os.path.isfile(header):
            reasons.append(f"{header} is missing for {python}")
    return reasons


def ldconfig_libcuda(runner: Runner = run) -> str:
    for ldconfig in ("/sbin/ldconfig", "/usr/sbin/ldconfig"):
        if os.path.exists(ldconfig):
            rc, out = runner([ldconfig, "-p"])
            return driver_libcuda(out) if rc == 0 else ""
    return ""


def check_cuda_links(spec: dict, runner: Runner = run) -> list[str]:
    home = spec["cuda_home"]
    libcuda_stub = spec.get("libcuda_stub", True)
    plan = plan_tree(
        home,
        spec.get("cccl_headers") or ["cub", "thrust", "cuda", "nv"],
        lib64=spec.get("lib64", True),
        unversioned_libs=spec.get("unversioned_libs", True),
        libcuda_stub=libcuda_stub,
        driver=ldconfig_libcuda(runner) if libcuda_stub else "",
    )[0]  # the plan; the lib folder, stub and build answers are the links module's
    reasons = list(plan.errors)
    reasons += [f"{path}: {'replace dangling' if dangling else 'create'} -> {target}"
                for path, target, dangling in plan.links]
    reasons += [f"{path}: remove dangling link" for path in plan.removals]
    return reasons


def check_groups(names: list[str]) -> list[str]:
    reasons = []
    for name in names:
        try:
            grp.getgrnam(name)
        except KeyError:
            reasons.append(f"group {name}: missing")
    return reasons


def check_users(specs: list[dict]) -> list[str]:
    reasons = []
    for spec in specs:
        name = spec["name"]
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            reasons.append(f"user {name}: missing")
            continue
        group = spec.get("group")
        if group and _group_name(entry.pw_gid) != group:
            reasons.append(f"user {name}: group {_group_name(entry.pw_gid)}, want {group}")
        for key, have in (("home", entry.pw_dir), ("shell", entry.pw_shell)):
            if spec.get(key) and have != spec[key]:
                reasons.append(f"user {name}: {key} {have}, want {spec[key]}")
    return reasons


SYSTEMCTL_PROPERTIES = "Id,LoadState,UnitFileState,ActiveState"


def parse_systemctl_show(output: str) -> list[dict[str, str]]:
    """``systemctl show -p ...`` of several units: one dict per unit, in the order asked."""
    units = []
    for block in output.strip().split("\n\n"):
        props = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        units.append(props)
    return units


def check_services(specs: list[dict], runner: Runner = run) -> list[str]:
    names = [spec["name"] for spec in specs]
    rc, out = runner(["systemctl", "show", f"--property={SYSTEMCTL_PROPERTIES}", "--", *names])
    if rc != 0:
        return [f"systemctl show failed for {', '.join(names)}"]
    shown = parse_systemctl_show(out)
    reasons = []
    for index, spec in enumerate(specs):
        props = shown[index] if index < len(shown) else {}
        name = spec["name"]
        if props.get("LoadState") != "loaded":
            reasons.append(f"{name}: {props.get('LoadState', 'unknown')}, want loaded")
            continue
        if spec.get("enabled") and props.get("UnitFileState") not in ("enabled", "static"):
            reasons.append(f"{name}: {props.get('UnitFileState')}, want enabled")
        if spec.get("active") and props.get("ActiveState") != "active":
            reasons.append(f"{name}: {props.get('ActiveState')}, want active")
    return reasons


def check_concern(concern: dict, dpkg_status: str = DPKG_STATUS, runner: Runner = run):
    """Reasons this concern drifted, and what its records read (path -> object)."""
    reasons: list[str] = []
    records: dict[str, Any] = {}
    reasons += check_groups(concern.get("groups") or [])
    reasons += check_users(concern.get("users") or [])
    for spec in concern.get("paths") or []:
        reasons += check_path(spec)
    for spec in concern.get("files") or []:
        reasons += check_file(spec)
    for spec in concern.get("records") or []:
        found, current = check_record(spec)
        reasons += found
        records[spec["path"]] = current
    if concern.get("debs"):
        reasons += check_debs(concern["debs"], dpkg_status)
    for spec in concern.get("dists") or []:
        reasons += check_dists(spec)
    for spec in concern.get("strays") or []:
        reasons += check_strays(spec)
    if concern.get("python_headers"):
        reasons += check_python_headers(concern["python_headers"], runner)
    if concern.get("cuda_links"):
        reasons += check_cuda_links(concern["cuda_links"], runner)
    if concern.get("services"):
        reasons += check_services(concern["services"], runner)
    return reasons, records


def stat_paths(paths: list[str]) -> dict[str, dict[str, bool]]:
    """What a task needs to know of a few paths besides drift (a venv's Python, a device)."""
    out = {}
    for path in paths:
        try:
            st = os.stat(path)
        except OSError:
            out[path] = {"exists": False, "isdir": False, "isreg": False, "ischr": False}
            continue
        out[path] = {"exists": True, "isdir": stat.S_ISDIR(st.st_mode),
                     "isreg": stat.S_ISREG(st.st_mode), "ischr": stat.S_ISCHR(st.st_mode)}
    return out


def http_get(spec: dict) -> dict:
    """One request: {status, json, msg, elapsed}; a GET, or a POST of ``body`` as JSON, with
    ``headers``. status 0 when nothing answered, json None unless the body is JSON, elapsed the
    seconds to the whole answer. No proxy: the URLs are the host's own services."""
    import time
    import urllib.error  # only here: http.client and ssl cost a probe that asks nothing
    import urllib.request

    url = spec["url"]
    headers = dict(spec.get("headers") or {})
    data = None
    if spec.get("body") is not None:
        data = json.dumps(spec["body"]).encode("utf-8")
        headers.setdefault("Content-Type", "application/json")
    request = urllib.request.Request(url, data=data, headers=headers)
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    began = time.monotonic()
    try:
        with opener.open(request, timeout=float(spec.get("timeout", 5))) as response:
            status, body = response.status, response.read()
    except urllib.error.HTTPError as exc:
        status, body = exc.code, exc.read()
    except (OSError, ValueError) as exc:  # refused, timed out, a bad URL
        return {"status": 0, "json": None, "msg": f"{url}: {exc}",
                "elapsed": round(time.monotonic() - began, 3)}
    elapsed = round(time.monotonic() - began, 3)
    try:
        parsed = json.loads(body.decode("utf-8"))
    except ValueError:
        parsed = None
    return {"status": status, "json": parsed, "msg": "", "elapsed": elapsed}


def probe(
    concerns: list[dict],
    dpkg_status: str = DPKG_STATUS,
    runner: Runner = run,
    stats: list[str] | None = None,
    http: list[dict] | None = None,
) -> dict:
    """Check every enabled concern: {drift, drifted, records, stats, http}."""
    drift: dict[str, list[str]] = {}
    records: dict[str, Any] = {}
    drifted: list[str] = []
    for concern in concerns:
        name = concern["name"]
        if not concern.get("enabled", True):
            continue
        reasons = [f"follows {earlier}, which drifted"
                   for earlier in concern.get("follows") or [] if earlier in drifted]
        found, read = check_concern(concern, dpkg_status, runner)
        reasons += found
        records.update(read)
        drift[name] = reasons
        if reasons:
            drifted.append(name)
    return {"drift": drift, "drifted": drifted, "records": records,
            "stats": stat_paths(stats or []),
            "http": {spec.get("name") or spec["url"]: http_get(spec) for spec in http or []}}


# The module's arguments; the action plugin state_probe applies them on the controller.
ARGUMENT_SPEC = {
    "concerns": {"type": "list", "elements": "dict", "required": True},
    "stats": {"type": "list", "elements": "path", "default": []},
    "dpkg_status": {"type": "path", "default": DPKG_STATUS},
    "http": {"type": "list", "elements": "dict", "default": [],
             "options": {"url": {"type": "str", "required": True},
                         "name": {"type": "str"},
                         "body": {"type": "raw"},
                         "headers": {"type": "dict", "default": {}, "no_log": True},
                         "timeout": {"type": "float", "default": 5}}},
}


def answer(concerns: list[dict], stats: list[str] | None = None,
           dpkg_status: str = DPKG_STATUS, http: list[dict] | None = None) -> dict:
    """The module's whole result, for validated arguments (the module and the action's bare
    run both return this)."""
    names = [c.get("name") for c in concerns]
    if None in names or len(set(names)) != len(names):
        return {"failed": True, "msg": f"every concern needs a unique name, got {names}"}
    return {"changed": False, **probe(concerns, dpkg_status, run, stats, http)}
