#!/usr/bin/python
"""Install the stack into a fresh release venv, verify it, switch the venv link in one rename."""

from __future__ import annotations

DOCUMENTATION = r"""
module: sglang_stack_release
short_description: Build the serving venv aside and switch to it with one rename
description:
  - Installs a wheel set into a new venv I(releases_dir)/I(release), with no index (and
    C(--require-hashes) when asked), under an exclusive lock per target that a second install waits
    for (at most I(lock_wait) seconds) and that a still-running orphaned installer keeps holding.
  - Checks free space first (what the release takes by I(uv_link_mode), estimated from the wheels,
    times I(space_factor), plus I(space_overhead_mb)), verifies the new venv (every pin's exact
    version via importlib.metadata, nothing beside them, then I(imports)), writes a completion
    marker last, then points I(venv) (a symlink) at it with one atomic rename. The release it
    replaced is kept as C(previous); older releases and half-installed ones are removed. A real
    folder at I(venv) (an in-place venv of an earlier layout) is moved into I(releases_dir) and
    kept as C(previous).
  - A release already in I(releases_dir) with its marker (the one kept as C(previous), for a
    rollback or a repair) is switched to only after it passes the same check; one that fails it is
    never switched to (the release is built anew aside, and the failed one removed after the
    switch).
  - A failed install or step after it (disk full, killed, timed out, bad wheel, failed check,
    marker or link not written) leaves I(venv) as it was and removes the half-built release; the
    message says what ran out or broke, and where, and I(removed) lists the removed folder.
  - With I(installer=uv) (the default) uv's binary is taken out of its pinned wheel
    (I(uv_wheel), checked against I(uv_sha256)) into I(uv_dir) once, the venv is made by
    C(uv venv) (or C(python -m venv) when I(seed_pip)) and the stack installed by
    C(uv pip install --offline --no-index --require-hashes) with uv's cache in I(uv_cache_dir).
  - The release counts as current only when the venv link points at it and its completion
    marker names I(release); I(repair) rebuilds a current release whose versions drifted, aside,
    under a new folder name, or switches to its earlier copy kept as C(previous) when that copy
    passes the check.
options:
  venv:
    {description: Public venv path (becomes a symlink)., type: path, required: true}
  releases_dir:
    {description: Folder of the release venvs., type: path, required: true}
  release:
    {description: Name of the release for this lock (folder name)., type: str, required: true}
  python:
    {description: Python that creates the venv., type: path, required: true}
  wheel_dir:
    {description: Folder of the wheels (pip --find-links)., type: path, required: true}
  hashes:
    description: sha256 of each pin's wheel ("name==version" -> hex); the release writes its
      requirements file with them.
    type: dict
    required: true
  require_hashes:
    {description: Install with pip --require-hashes., type: bool, default: true}
  install_args:
    {description: Extra pip install arguments., type: list, elements: str, default: []}
  pins:
    description: name==version pins whose exact versions the new venv must have.
    type: list
    elements: str
    default: []
  imports:
    {description: Modules the new venv must import., type: list, elements: str, default: []}
  space_factor:
    description: Free space needed on the releases folder's filesystem, as a multiple of what the
      release takes there, estimated from the pins' wheels in I(wheel_dir) by I(uv_link_mode)
      (copy, clone, hardlink - every file's bytes; symlink - a link per file), with the
      bytecode when I(compile_bytecode). 0 with I(space_overhead_mb) 0 skips the check.
    type: float
    default: 0
  space_overhead_mb:
    {description: MiB needed beyond that (a fresh venv with pip)., type: int, default: 0}
  lock_file:
    {description: The per-target install lock., type: path, required: true}
  lock_wait:
    {description: Seconds to wait for another install's lock., type: int, default: 600}
  timeout:
    {description: Seconds the install may take before it is stopped., type: int, default: 3600}
  installer:
    {description: Which installer runs., type: str, choices: [uv, pip], default: uv}
  uv_wheel:
    {description: "uv's wheel in I(wheel_dir) (installer=uv).", type: path}
  uv_sha256:
    {description: "sha256 of I(uv_wheel) from the tool lock.", type: str}
  uv_dir:
    {description: Folder of the uv binary on the target., type: path}
  uv_cache_dir:
    {description: "uv's cache (\"\" for none).", type: path, default: ""}
  uv_link_mode:
    {description: How uv puts files from its cache into the venv., type: str, default: copy,
     choices: [copy, hardlink, symlink, clone]}
  seed_pip:
    {description: Create the venv with pip in it (python -m venv)., type: bool, default: false}
  compile_bytecode:
    description: Write every module's bytecode at install (uv --compile-bytecode; pip's default).
      The services' user cannot write the root-owned venv, so without it each process of each
      start compiles its imports again.
    type: bool
    default: true
  ignore_extra:
    {description: Distributions allowed beside the pins., type: list, elements: str, default: []}
  repair:
    {description: Rebuild the release even when it is current (its versions drifted)., type: bool,
     default: false}
author:
  - sglang-lxc contributors (!UNKNOWN)
"""

EXAMPLES = r"""
- name: Build the locked stack aside and switch the serving venv to it
  sglang_lxc.serving.sglang_stack_release:
    venv: /opt/sglang/venv
    releases_dir: /opt/sglang/venvs
    release: 0.5.12-1a2b3c4d5e
    python: /usr/bin/python3
    wheel_dir: /var/cache/sglang-lxc/node/wheelhouse/sglang-0.5.12
    hashes:
      sglang==0.5.12: 5f0c...        # the lock's sha256 of each pin's wheel
    pins: [sglang==0.5.12]
    imports: [sglang]
    install_args: [--no-deps]
    uv_wheel: >-
      /var/cache/sglang-lxc/node/wheelhouse/sglang-0.5.12/uv-0.13.8-py3-none-manylinux_2_17_x86_64.manylinux2014_x86_64.whl
    uv_sha256: e18a57b8b352eb7c8feb317b9f6f533c8f0ad9673fd6cf34bbe3cf1a9f6a8984
    uv_dir: /usr/local/lib/sglang-lxc/uv-0.13.8
    uv_cache_dir: /var/cache/sglang-lxc/node/uv
    uv_link_mode: symlink
    space_factor: 1.25
    space_overhead_mb: 64
    lock_file: /opt/sglang/.sglang-lxc-install.lock
  register: release
"""

RETURN = r"""
release:
  {description: Path of the release now current., type: str, returned: success}
previous:
  {description: "Path of the release kept for rollback, or null.", type: str, returned: success}
removed:
  {description: Release folders removed (older or half-installed)., type: list, returned: success}
installed:
  {description: Whether this run installed a new release., type: bool, returned: success}
elapsed_s:
  {description: Seconds the install took., type: float, returned: success}
rejected:
  description: Kept releases that failed their check before a switch (never switched to; the
    release was built anew and they were removed after the switch).
  type: list
  returned: always
need:
  description: The free-space estimate (bytes, files, folders, link_mode), when the release was
    built.
  type: dict
  returned: when a release was built and I(space_factor) or I(space_overhead_mb) is set
"""

import contextlib
import json
import os
import time
import zipfile

from ansible.module_utils.basic import AnsibleModule
from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_release_fs import (
    Lock,
    aside_dir,
    classify,
    disk_full,
    free_bytes,
    full_message,
    human,
    link_target,
    mount_point,
    remove_tree,
    run,
    switch_link,
)
from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_stack import (
    MARKER,
    VERSIONS_CODE,
    checked_state,
    drift,
    pin_wheels,
    pip_install_argv,
    read_marker,
    release_size,
    requirements_text,
    uv_install_argv,
    uv_venv_argv,
)
from ansible_collections.sglang_lxc.serving.plugins.module_utils.uv_tool import ensure_uv, uv_env

PREVIOUS = "previous"

IMPORTS_CODE = r"""
import importlib, json, sys
bad = []
for mod in json.loads(sys.argv[1]):
    try:
        importlib.import_module(mod)
    except Exception as exc:
        bad.append("import %s: %s: %s" % (mod, type(exc).__name__, exc))
print(json.dumps(bad))
"""


def new_release_dir(releases: str, release: str, current: str | None, repair: bool) -> str:
    """Folder to build the release in, or to switch to when it is there with its marker and
    passes its check: its own name, or beside the live one when that folder is what the link
    serves (a repair, or a marker lost by hand): the live venv is never rebuilt."""
    path = os.path.join(releases, release)
    if current and os.path.realpath(path) == current:
        return aside_dir(path)
    return path


def check_release(release_dir: str, p: dict, lock_fd: int) -> list[str]:
    """Every pin at its exact version, nothing beside them, then the imports."""
    python = os.path.join(release_dir, "bin", "python")
    try:
        rc, out, _err = run([python, "-I", "-c", VERSIONS_CODE], 600, lock_fd)
        lines = out.strip().splitlines()
        versions = json.loads(lines[-1])["versions"] if rc == 0 and lines else None
    except (OSError, ValueError, KeyError, TypeError) as exc:
        return [f"{python}: {exc}"]
    if versions is None:
        return [f"{python} exit {rc}: {out[-2000:]}"]
    d, p["checked_versions"] = drift(p["pins"], versions, p["ignore_extra"]), versions
    problems = [f"{pin} (found nothing)" for pin in d["missing"]]
    problems += [f"{w['pin']} (found {w['found']})" for w in d["wrong"]]
    problems += [f"{x} (not in the lock)" for x in d["extra"]]
    if p["imports"]:
        rc, out, _err = run([python, "-c", IMPORTS_CODE, json.dumps(p["imports"])], 600, lock_fd)
        lines = out.strip().splitlines()
        problems += json.loads(lines[-1]) if rc == 0 and lines else [out[-2000:]]
    return problems


def install(p: dict, release_dir: str, lock_fd: int, ctx: dict) -> tuple[int, str, bool]:
    """Make the venv at release_dir and install the pins into it."""
    releases = ctx["releases_dir"]
    reqs = os.path.join(releases, f".requirements-{os.path.basename(release_dir)}.txt")
    with open(reqs, "w", encoding="utf-8") as fh:
        fh.write(requirements_text(p["pins"], p["hashes"]))
    args = list(p["install_args"])
    if p["installer"] == "uv":
        env = uv_env(p["uv_cache_dir"], p["uv_link_mode"])
        venv_argv = ([p["python"], "-m", "venv", release_dir] if p["seed_pip"]
                     else uv_venv_argv(ctx["uv"], p["python"], release_dir))
        rc, out, timed_out = run(venv_argv, 300, lock_fd, env)
        if rc == 0:
            rc, out, timed_out = run(uv_install_argv(ctx["uv"], release_dir, p["wheel_dir"], reqs,
                                                     p["require_hashes"], args,
                                                     p["compile_bytecode"]),
                                     p["timeout"], lock_fd, env)
    else:
        # pip installs with the venv's own pip
        rc, out, timed_out = run([p["python"], "-m", "venv", release_dir], 300, lock_fd)
        if rc == 0:
            rc, out, timed_out = run(pip_install_argv(release_dir, p["wheel_dir"], reqs,
                                                      p["require_hashes"], args,
                                                      p["compile_bytecode"]),
                                     p["timeout"], lock_fd)
    with contextlib.suppress(OSError):
        os.unlink(reqs)
    return rc, out, timed_out


def write_marker(release_dir: str, data: dict) -> None:
    """The completion marker, written beside and renamed into place, flushed to disk."""
    marker = os.path.join(release_dir, MARKER)
    tmp = f"{marker}.tmp"
    with open(tmp, "w", encoding="utf-8") as fh:
        json.dump(data, fh)
        fh.flush()
        os.fsync(fh.fileno())
    os.replace(tmp, marker)


def estimate_need(p: dict, block: int) -> dict | None:
    """Free bytes the release needs on its filesystem (None when the check is off)."""
    if not (p["space_factor"] or p["space_overhead_mb"]):
        return None
    wheels, lacking = pin_wheels(p["wheel_dir"], p["pins"])
    size = release_size(wheels, p["uv_link_mode"] if p["installer"] == "uv" else "copy", block,
                        p["compile_bytecode"])
    size["lacking"] = len(lacking)  # pins without a wheel here: the install names them
    size["need"] = int(size["bytes"] * p["space_factor"] + p["space_overhead_mb"] * 1048576)
    return size


class ReleaseFailed(Exception):
    """A step of the new release failed; the message says what, where, and what was removed."""


def discard(release_dir: str, result: dict) -> str:
    """Remove a release this run built (half-built, or failed a step): says what was removed."""
    if not os.path.lexists(release_dir):
        return "nothing was left to remove"
    remove_tree(release_dir)
    result["removed"].append(release_dir)
    return f"the half-built release {release_dir} was removed"


def step_failed(ctx: dict, result: dict, what: str, built: bool = True) -> str:
    """The message for a failed step after the install (ctx["step"]): the free space is read
    first, then the half-built release is removed and the removal said; a full filesystem gets
    the same message as a full disk during the install."""
    ctx["free_at_failure"] = free_bytes(ctx["releases_dir"])
    ctx["removed_note"] = (discard(ctx["release_dir"], result) if built
                           else "nothing was removed")
    if disk_full(what, ctx):
        return full_message(ctx)
    return (f"{ctx['step']} {ctx['release_dir']} failed: {what}; {ctx['removed_note']} and the "
            "current venv is unchanged.")


def build(module: AnsibleModule, p: dict, lock_fd: int, ctx: dict, result: dict) -> None:
    """Install the release into ctx["release_dir"], check it and mark it complete. Any failure
    removes it and raises ReleaseFailed with the message."""
    release_dir, releases = ctx["release_dir"], ctx["releases_dir"]
    try:
        need = estimate_need(p, os.statvfs(releases).f_frsize or 4096)
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        module.warn(f"could not estimate the release's size from {p['wheel_dir']}: {exc}")
        need = None
    if need:
        result["need"] = need
        ctx["need"] = need["need"]
        free = free_bytes(releases)
        if free < need["need"]:
            raise ReleaseFailed(
                f"no space left on {ctx['mount']} ({human(free)} free, about "
                f"{human(need['need'])} needed: {human(need['bytes'])} for {need['files']} files "
                f"in {need['link_mode']} mode x {p['space_factor']:g} + "
                f"{p['space_overhead_mb']} MiB) to install the stack into {release_dir}; the "
                "current venv is unchanged. Free space there and run again.")
    start = time.monotonic()
    if p["installer"] == "uv":
        if not (p["uv_wheel"] and p["uv_sha256"] and p["uv_dir"]):
            raise ReleaseFailed("installer uv needs uv_wheel, uv_sha256 and uv_dir (uv's wheel "
                                "is not in the set); the current venv is unchanged.")
        try:
            ctx["uv"], result["uv_extracted"] = ensure_uv(
                p["uv_wheel"], p["uv_sha256"], p["uv_dir"])
        except (OSError, ValueError) as exc:
            raise ReleaseFailed(f"could not take uv out of its wheel: {exc}; the current venv "
                                "is unchanged.") from None
    ctx["step"] = "installing the stack into"
    try:
        rc, out, timed_out = install(p, release_dir, lock_fd, ctx)
    except (OSError, ValueError) as exc:
        rc, out, timed_out = 1, str(exc), False
    if rc != 0:
        ctx["free_at_failure"] = free_bytes(releases)
        ctx["removed_note"] = discard(release_dir, result)
        result["rc"], result["stdout"] = rc, out[-4000:]
        raise ReleaseFailed(classify(out, rc, timed_out, ctx))
    finish(p, lock_fd, ctx, result)
    result["installed"] = True
    result["elapsed_s"] = round(time.monotonic() - start, 1)


def finish(p: dict, lock_fd: int, ctx: dict, result: dict) -> None:
    """The steps after the install: check the release, then mark it complete. A failure removes
    it and raises ReleaseFailed, with the disk-full message when the filesystem ran full."""
    release_dir, releases = ctx["release_dir"], ctx["releases_dir"]
    ctx["step"] = "checking the new release"
    problems = check_release(release_dir, p, lock_fd)
    if problems:
        what = "; ".join(problems[:10])
        if disk_full(what, {"free_at_failure": free_bytes(releases)}):
            raise ReleaseFailed(step_failed(ctx, result, what))
        raise ReleaseFailed(
            f"the new release {release_dir} failed its check; {discard(release_dir, result)} "
            f"and the current venv is unchanged: {what}")
    ctx["step"] = "writing the completion marker of"
    try:
        write_marker(release_dir, {
            "release": p["release"], "pins": len(p["pins"]), "imports": p["imports"],
            "installer": p["installer"], "installed_at": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
            **checked_state(release_dir, p.get("checked_versions"))})
    except OSError as exc:
        raise ReleaseFailed(step_failed(ctx, result, str(exc))) from None


def main() -> None:
    module = AnsibleModule(
        argument_spec={
            "venv": {"type": "path", "required": True},
            "releases_dir": {"type": "path", "required": True},
            "release": {"type": "str", "required": True},
            "python": {"type": "path", "required": True},
            "wheel_dir": {"type": "path", "required": True},
            "hashes": {"type": "dict", "required": True},
            "require_hashes": {"type": "bool", "default": True},
            "install_args": {"type": "list", "elements": "str", "default": []},
            "pins": {"type": "list", "elements": "str", "default": []},
            "imports": {"type": "list", "elements": "str", "default": []},
            "space_factor": {"type": "float", "default": 0},
            "space_overhead_mb": {"type": "int", "default": 0},
            "lock_file": {"type": "path", "required": True},
            "lock_wait": {"type": "int", "default": 600},
            "timeout": {"type": "int", "default": 3600},
            "installer": {"type": "str", "choices": ["uv", "pip"], "default": "uv"},
            "uv_wheel": {"type": "path"},
            "uv_sha256": {"type": "str"},
            "uv_dir": {"type": "path"},
            "uv_cache_dir": {"type": "path", "default": ""},
            "uv_link_mode": {"type": "str", "default": "copy",
                             "choices": ["copy", "hardlink", "symlink", "clone"]},
            "seed_pip": {"type": "bool", "default": False},
            "compile_bytecode": {"type": "bool", "default": True},
            "ignore_extra": {"type": "list", "elements": "str", "default": []},
            "repair": {"type": "bool", "default": False},
        },
        supports_check_mode=True,
    )
    p = module.params
    venv, releases = p["venv"].rstrip("/"), p["releases_dir"].rstrip("/")
    previous_link = os.path.join(releases, PREVIOUS)
    current = link_target(venv)
    marker = read_marker(current) if current else None
    up_to_date = bool(marker) and marker.get("release") == p["release"] and not p["repair"]
    release_dir = new_release_dir(releases, p["release"], current, p["repair"])
    result = {"release": current if up_to_date else release_dir,
              "previous": link_target(previous_link), "removed": [], "rejected": [],
              "installed": False, "elapsed_s": 0.0, "lock_waited_s": 0.0,
              "installer": p["installer"]}
    if up_to_date:
        module.exit_json(changed=False, **result)
    if module.check_mode:
        module.exit_json(changed=True, **result)

    os.makedirs(releases, exist_ok=True)
    lock = Lock(p["lock_file"])
    try:
        result["lock_waited_s"] = round(lock.acquire(p["lock_wait"]), 1)
    except TimeoutError as exc:
        module.fail_json(msg=(
            f"another stack install on this host still holds {p['lock_file']} ({exc}) after "
            f"{p['lock_wait']} s (sglang_stack_lock_wait); an install left running by a dead "
            "controller ends by itself within sglang_stack_install_timeout. Run again later, or "
            "stop that process."), **result)

    # State may have moved while we waited.
    current = link_target(venv)
    legacy = os.path.isdir(venv) and not os.path.islink(venv)
    release_dir = new_release_dir(releases, p["release"], current, p["repair"])
    done = read_marker(release_dir)
    if done and done.get("release") == p["release"]:
        # a finished release kept here (previous): switched to only if it passes the same check
        # as a new one, else it is built anew aside and the failed one goes after the switch
        problems = check_release(release_dir, p, lock.fd)
        if problems:
            result["rejected"].append(release_dir)
            rejected, release_dir = release_dir, aside_dir(os.path.join(releases, p["release"]))
            module.warn(f"the kept release {rejected} failed its check, so it is not switched "
                        f"to; the release is built anew as {release_dir}: "
                        f"{'; '.join(problems[:10])}")
            done = None
    result["release"] = release_dir
    ctx = {"release_dir": release_dir, "releases_dir": releases, "mount": mount_point(releases),
           "need": 0, "timeout": p["timeout"], "wheel_dir": p["wheel_dir"],
           "installer": p["installer"]}
    built = not (done and done.get("release") == p["release"])
    if built:
        if os.path.lexists(release_dir):
            remove_tree(release_dir)
            result["removed"].append(release_dir)
            module.warn(f"removed the half-installed release {release_dir} "
                        "left by an interrupted install")
        try:
            build(module, p, lock.fd, ctx, result)
        except ReleaseFailed as exc:
            module.fail_json(msg=str(exc), **result)

    # Switch: the old current becomes previous; one rename makes the new one current.
    old = None
    try:
        if legacy:
            old = os.path.join(releases, "legacy-" + time.strftime("%Y%m%d%H%M%S"))
            os.rename(venv, old)
        elif current and current != os.path.realpath(release_dir) and os.path.isdir(current):
            old = current
        switch_link(venv, release_dir)
    except OSError as exc:
        if legacy and old and os.path.isdir(old) and not os.path.lexists(venv):
            os.rename(old, venv)  # the in-place venv goes back where it served
        ctx["step"] = "switching the venv link to"
        module.fail_json(msg=step_failed(ctx, result, str(exc), built=built), **result)
    keep = {os.path.realpath(release_dir)}
    if old:
        keep.add(old)  # serving until its units restart; kept even if the link below fails
        try:
            switch_link(previous_link, old)
        except OSError as exc:
            module.warn(f"could not point {previous_link} at {old}: {exc}; it is kept")
    keep.add(link_target(previous_link))
    for name in sorted(os.listdir(releases)):
        path = os.path.join(releases, name)
        if name == PREVIOUS or os.path.islink(path) or not os.path.isdir(path):
            continue
        if os.path.realpath(path) not in keep:
            remove_tree(path)
            result["removed"].append(path)
    result["previous"] = link_target(previous_link)
    module.exit_json(changed=True, **result)


if __name__ == "__main__":
    main()
