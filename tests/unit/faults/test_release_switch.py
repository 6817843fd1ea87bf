"""sglang_stack_release's main(), run in this process as ansible runs it on a target (its
arguments through ansible's own module_utils.testing), on real venvs made with the interpreter
running pytest: which release it switches to, and how each step after the install fails.

Issue 21: a kept release (`previous`) was switched to on the word of its completion marker, and a
full disk while the new release was checked or marked gave a raw `[Errno 28]` and left it behind.
"""

from __future__ import annotations

import base64
import errno
import hashlib
import json
import os
import sys
import zipfile

import pytest
from ansible.module_utils.testing import patch_module_args
from ansible_collections.sglang_lxc.serving.plugins.module_utils import (
    sglang_release_fs as release_fs,
)
from ansible_collections.sglang_lxc.serving.plugins.module_utils import sglang_stack as stack
from ansible_collections.sglang_lxc.serving.plugins.modules import sglang_stack_release as release

from tests.venvs import make_venv

PINS = ["idna==3.10", "nest-asyncio==1.6.0", "six==1.17.0"]
MODULES = {"idna": "idna", "nest-asyncio": "nest_asyncio", "six": "six"}


def make_release(path, dists: dict[str, str], release: str | None = None, broken: str = ""):
    """A real venv (no pip) holding each distribution's .dist-info and an importable module;
    the module named `broken` raises on import. With `release`, the completion marker."""
    make_venv(path, dists)
    site = next(path.glob("lib/python3*/site-packages"))
    for name in dists:
        module = MODULES[name]
        body = "raise ImportError('damaged')\n" if module == broken else ""
        (site / f"{module}.py").write_text(body)
    if release:
        (path / stack.MARKER).write_text(json.dumps({"release": release}))
    return path


def tree(tmp_path, current: str, previous: str | None = None):
    """venv -> venvs/<current>, venvs/previous -> venvs/<previous>, as the module leaves them."""
    (tmp_path / "venv").symlink_to(f"venvs/{current}")
    if previous:
        (tmp_path / "venvs" / "previous").symlink_to(previous)
    return tmp_path / "venv"


def args(tmp_path, release: str, **extra) -> dict:
    return {"venv": str(tmp_path / "venv"), "releases_dir": str(tmp_path / "venvs"),
            "release": release, "python": sys.executable, "wheel_dir": str(tmp_path / "wheels"),
            "hashes": {}, "pins": PINS, "imports": list(MODULES.values()),
            "lock_file": str(tmp_path / ".lock"), "lock_wait": 5, "installer": "uv",
            # the uv wheel is not there: a release that must be built stops right there
            "uv_wheel": str(tmp_path / "wheels" / "uv-0.0.0-py3-none-any.whl"),
            "uv_sha256": "0" * 64, "uv_dir": str(tmp_path / "uv"), **extra}


def run_module(module_args: dict, capsys) -> dict:
    with patch_module_args(module_args), pytest.raises(SystemExit):
        release.main()
    captured = capsys.readouterr()
    return {**json.loads(captured.out.strip().splitlines()[-1]), "stderr": captured.err}


def warnings(res: dict) -> str:
    """The module's warnings, one string: returned with the result (ansible-core 2.19 returns
    them as structured events), or printed by ansible's display when another test file in this
    process loaded ansible's controller side (module_utils.common.warnings then prints them)."""
    returned = [w["event"]["msg"] if isinstance(w, dict) else w for w in res.get("warnings", [])]
    return " ".join([*returned, " ".join(res["stderr"].split())])


FULL = {"idna": "3.10", "nest-asyncio": "1.6.0", "six": "1.17.0"}


def test_a_repair_never_switches_to_a_damaged_kept_copy_of_the_release(tmp_path, capsys):
    """The drill of issue 21: the current release (a repair, built aside) lost idna; the kept
    `previous` is the earlier copy of the same release, marked complete but missing
    nest-asyncio. The repair must not switch to it on the word of its marker."""
    venvs = tmp_path / "venvs"
    make_release(venvs / "r1", {k: v for k, v in FULL.items() if k != "nest-asyncio"}, "r1")
    make_release(venvs / "r1.20260101000000", {k: v for k, v in FULL.items() if k != "idna"},
                 "r1")
    venv = tree(tmp_path, "r1.20260101000000", "r1")
    res = run_module(args(tmp_path, "r1", repair=True), capsys)
    assert os.readlink(venv) == "venvs/r1.20260101000000"  # not switched to the damaged copy
    assert res["rejected"] == [str(venvs / "r1")]
    warned = warnings(res)
    assert f"the kept release {venvs / 'r1'} failed its check" in warned
    assert "nest-asyncio==1.6.0 (found nothing)" in warned
    # it is built anew aside, under a name no folder holds (here: no uv wheel, so it stops)
    assert res["failed"] and "could not take uv out of its wheel" in res["msg"]
    assert res["release"].startswith(str(venvs / "r1.")) and not os.path.exists(res["release"])
    assert (venvs / "r1" / stack.MARKER).exists()  # a failed run removes no kept release


@pytest.mark.parametrize("broken", ["", "six"])
def test_a_rollback_switches_to_the_kept_release_only_when_it_passes_the_check(
        tmp_path, capsys, broken):
    """Back to the release kept as `previous`: switched to at once when it passes every check
    (pins, nothing extra, the imports), never when an import fails."""
    venvs = tmp_path / "venvs"
    make_release(venvs / "r1", FULL, "r1", broken=broken)
    make_release(venvs / "r2", {**FULL, "idna": "3.11"}, "r2")
    venv = tree(tmp_path, "r2", "r1")
    res = run_module(args(tmp_path, "r1"), capsys)
    if not broken:
        assert res["changed"] and not res["installed"] and not res.get("rejected")
        assert os.readlink(venv) == "venvs/r1"
        assert os.readlink(venvs / "previous") == "r2"
        return
    assert os.readlink(venv) == "venvs/r2"  # not switched to the release that fails to import
    assert res.get("failed")
    assert res["rejected"] == [str(venvs / "r1")]
    assert "import six: ImportError: damaged" in warnings(res)


def digest(data: bytes) -> str:
    return base64.urlsafe_b64encode(hashlib.sha256(data).digest()).decode().rstrip("=")


def test_a_link_that_cannot_be_switched_is_named_and_the_old_release_serves(tmp_path, capsys):
    """The last step: the new venv link cannot be made (here a folder stands where the module
    writes it before the rename). A message naming the step, no traceback, the link unchanged,
    and the kept release it was switching to not removed (this run did not build it)."""
    venvs = tmp_path / "venvs"
    make_release(venvs / "r1", FULL, "r1")
    make_release(venvs / "r2", {**FULL, "idna": "3.11"}, "r2")
    venv = tree(tmp_path, "r2", "r1")
    (tmp_path / f"venv.new-{os.getpid()}").mkdir()  # main() runs in this process
    res = run_module(args(tmp_path, "r1"), capsys)
    assert res["failed"] and res["msg"].startswith(f"switching the venv link to {venvs / 'r1'} "
                                                   "failed: "), res
    assert "nothing was removed and the current venv is unchanged" in res["msg"]
    assert os.readlink(venv) == "venvs/r2" and (venvs / "r1" / stack.MARKER).exists()


def wheel(folder, name: str, version: str, module: str, body: str = "") -> str:
    """A real wheel file (PEP 427) holding one module; returns its sha256."""
    dist = name.replace("-", "_")
    files = {f"{module}.py": body.encode(),
             f"{dist}-{version}.dist-info/METADATA":
                 f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode(),
             f"{dist}-{version}.dist-info/WHEEL":
                 b"Wheel-Version: 1.0\nGenerator: test\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
    record = [f"{path},sha256={digest(data)},{len(data)}" for path, data in files.items()]
    files[f"{dist}-{version}.dist-info/RECORD"] = (
        "\n".join([*record, f"{dist}-{version}.dist-info/RECORD,,"]) + "\n").encode()
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w") as zf:
        for arc, data in files.items():
            zf.writestr(arc, data)
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_full_disk_while_the_marker_is_written_is_named_and_the_release_removed(
        tmp_path, capsys, monkeypatch):
    """A real install (pip, from two wheels made here, about 8 s of CPU, most of it ensurepip),
    then ENOSPC while the completion marker is written: the same message as a full disk during
    the install, the half-built release removed and listed, the old release still current."""
    venvs, wheels = tmp_path / "venvs", tmp_path / "wheels"
    wheels.mkdir()
    make_release(venvs / "r1", {"six": "1.17.0"}, "r1")
    venv = tree(tmp_path, "r1")
    pins = ["six==1.17.0", "idna==3.10"]
    hashes = {"six==1.17.0": wheel(wheels, "six", "1.17.0", "six"),
              "idna==3.10": wheel(wheels, "idna", "3.10", "idna")}

    def fsync(fd):  # the marker is the only file the module itself writes and syncs
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", fsync)
        res = run_module(args(tmp_path, "r2", installer="pip", pins=pins, hashes=hashes,
                              imports=["six", "idna"], install_args=["--no-deps"]), capsys)
    new = str(venvs / "r2")
    assert res["failed"], res
    assert res["msg"].startswith(f"no space left on {release_fs.mount_point(str(venvs))} ("), res
    assert (f"while writing the completion marker of {new}; the half-built release {new} was "
            "removed and the current venv is unchanged") in res["msg"]
    assert res["removed"] == [new] and not os.path.lexists(new)
    assert os.readlink(venv) == "venvs/r1"  # the old release still serves


@pytest.mark.parametrize("step", ["check", "marker"])
def test_a_full_disk_after_the_install_is_named_and_the_release_removed(
        tmp_path, monkeypatch, step):
    """The steps after the install (finish()) on a release as an install leaves it. check:
    ENOSPC from the kernel (/dev/full) in an import, as a module that writes a cache file on
    import meets a full disk; marker: ENOSPC when the marker is flushed. Either way the disk-full
    message, not a failed check or a traceback, and the release removed and listed."""
    venvs = tmp_path / "venvs"
    new = make_release(venvs / "r2", FULL)
    if step == "check":
        site = next(new.glob("lib/python3*/site-packages"))
        (site / "idna.py").write_text("with open('/dev/full', 'w') as fh:\n"
                                      "    fh.write('x' * 65536)\n")
    else:
        def fsync(fd):
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        monkeypatch.setattr(os, "fsync", fsync)
    p = args(tmp_path, "r2", ignore_extra=[])
    ctx = {"release_dir": str(new), "releases_dir": str(venvs), "mount": "/opt/sglang",
           "need": 0, "timeout": 5, "wheel_dir": "/w"}
    result = {"removed": []}
    lock = release_fs.Lock(str(tmp_path / ".lock"))
    with pytest.raises(release.ReleaseFailed) as failed:
        release.finish(p, lock.fd, ctx, result)
    monkeypatch.undo()
    msg = str(failed.value)
    during = "checking the new release" if step == "check" else "writing the completion marker of"
    assert msg.startswith("no space left on /opt/sglang ("), msg
    assert f"while {during} {new}; the half-built release {new} was removed" in msg
    assert result["removed"] == [str(new)] and not new.exists()
    if step == "marker":
        return
    # a check that fails for another reason says so, and removes the release too
    again = make_release(venvs / "r2", {**FULL, "six": "1.16.0"})
    with pytest.raises(release.ReleaseFailed) as failed:
        release.finish(p, lock.fd, ctx, {"removed": []})
    assert "failed its check" in str(failed.value) and "six==1.17.0 (found 1.16.0)" in str(
        failed.value)
    assert not again.exists()


def zeros_wheel(folder, name: str, version: str, megabytes: int) -> str:
    """A real wheel whose one data file is `megabytes` of zeros (it compresses to almost nothing,
    as a wheel's big libraries do not); returns its sha256."""
    dist = name.replace("-", "_")
    path = folder / f"{dist}-{version}-py3-none-any.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as zf:
        zf.writestr(f"{dist}/__init__.py", "")
        zf.writestr(f"{dist}/lib/blob.bin", bytes(megabytes << 20))
        zf.writestr(f"{dist}-{version}.dist-info/METADATA",
                    f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_release_size_is_read_from_the_wheels_by_link_mode(tmp_path):
    """copy: every file's bytes in whole blocks; symlink: a block per link; both: a block per
    folder; the .dist-info files count in full either way (uv writes RECORD there)."""
    zeros_wheel(tmp_path, "big", "1.0", 8)
    (tmp_path / "uv-0.9.0-py3-none-manylinux_2_17_x86_64.whl").write_bytes(b"not a pin")
    wheels, lacking = stack.pin_wheels(str(tmp_path), ["Big==1.0", "gone==2"])
    assert wheels == [str(tmp_path / "big-1.0-py3-none-any.whl")] and lacking == ["gone==2"]
    copy = stack.release_size(wheels, "copy", 4096)
    link = stack.release_size(wheels, "symlink", 4096)
    assert copy["files"] == link["files"] == 3
    assert copy["folders"] == 3  # big, big/lib, big-1.0.dist-info
    # the blob, METADATA (the empty __init__.py takes no block), the folders
    assert copy["bytes"] == (8 << 20) + 4096 + 3 * 4096
    assert link["bytes"] == 3 * 4096 + 4096 + 3 * 4096  # links, METADATA itself, folders
    assert stack.release_size(wheels, "hardlink", 4096)["bytes"] == copy["bytes"]
    # bytecode compiled at install: 1.5 x each module's bytes in whole blocks (the empty
    # __init__.py: none), and a __pycache__ folder for the one folder of modules, any link mode
    compiled = stack.release_size(wheels, "symlink", 4096, bytecode=True)
    assert compiled["bytes"] == link["bytes"] + 4096 and compiled["bytecode"] == 0
    mods = tmp_path / "mods-1.0-py3-none-any.whl"
    with zipfile.ZipFile(mods, "w") as zf:
        zf.writestr("mods/a.py", "x" * 6000)  # 9000 bytes of bytecode: 3 blocks
        zf.writestr("mods/sub/b.py", "y" * 100)  # 1 block
    plain = stack.release_size([str(mods)], "copy", 4096)
    compiled = stack.release_size([str(mods)], "copy", 4096, bytecode=True)
    assert compiled["bytecode"] == 4 * 4096
    assert compiled["bytes"] == plain["bytes"] + 4 * 4096 + 2 * 4096  # two __pycache__ folders


def test_the_free_space_check_asks_for_what_the_link_mode_writes(tmp_path, capsys):
    """The same wheels and factor: copy mode is refused for lack of space where symlink mode
    (a link per file) goes on to the install (which stops here for want of uv's wheel)."""
    venvs, wheels = tmp_path / "venvs", tmp_path / "wheels"
    wheels.mkdir()
    make_release(venvs / "r1", {"six": "1.17.0"}, "r1")
    tree(tmp_path, "r1")
    hashes = {"big==1.0": zeros_wheel(wheels, "big", "1.0", 8)}
    # 8 MiB copied x factor is 8 times the free space; 7 blocks linked x factor is under 3 %
    factor = release_fs.free_bytes(str(tmp_path)) / (1 << 20)
    base = args(tmp_path, "r2", pins=["big==1.0"], hashes=hashes, imports=[],
                space_factor=factor, space_overhead_mb=0)
    copy = run_module({**base, "uv_link_mode": "copy"}, capsys)
    assert copy["failed"] and copy["msg"].startswith("no space left on "), copy
    assert "needed: 8 MB for 3 files in copy mode" in copy["msg"]
    # main() runs in this process: its lock's descriptor stays open, so another lock file
    link = run_module({**base, "uv_link_mode": "symlink", "lock_file": str(tmp_path / ".lock2")},
                      capsys)
    assert "could not take uv out of its wheel" in link["msg"], link
    assert link["need"]["link_mode"] == "symlink" and link["need"]["files"] == 3
    assert link["need"]["need"] < release_fs.free_bytes(str(tmp_path)) < copy["need"]["need"]
