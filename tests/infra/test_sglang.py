"""Verify the SGLang stack and the sgl-kernel source build (role sglang) on a serving host.

Run against your own hosts:

    pytest tests/infra/test_sglang.py --hosts=ansible://sglang_servers \
        --ansible-inventory=inventory/example

The venv is ``SGLANG_LXC_VENV``, else the inventory's ``sglang_lxc_venv``, else
``/opt/sglang/venv``. Stack checks run where sglang is installed; build checks where the role
left its stamp (sgl-kernel built from source).
"""

from __future__ import annotations

import json
import os
import shlex

import pytest

pytestmark = pytest.mark.milestone("sglang")


@pytest.fixture
def venv(host) -> str:
    if os.environ.get("SGLANG_LXC_VENV"):
        return os.environ["SGLANG_LXC_VENV"]
    try:
        return host.ansible.get_variables().get("sglang_lxc_venv", "/opt/sglang/venv")
    except Exception:  # a non-ansible backend
        return "/opt/sglang/venv"


def py(host, venv: str, code: str):
    return host.run(f"{venv}/bin/python -c {shlex.quote(code)}")


def installed(host, venv: str, dist: str) -> str | None:
    """The distribution's version, or None where the venv does not hold it. Any other failure
    (ssh, a broken venv, bad metadata) fails the check rather than skipping it."""
    res = py(host, venv, "import importlib.metadata as m\n"
                         f"try:\n    print(m.version({dist!r}))\n"
                         "except m.PackageNotFoundError:\n    print('<none>')")
    assert res.rc == 0, f"{venv}: cannot read {dist}'s metadata: {res.stderr}"
    version = res.stdout.strip()
    return None if version == "<none>" else version


def test_venv_python_runs(host, venv):
    assert host.file(f"{venv}/bin/python").exists
    assert py(host, venv, "import sys; print(sys.prefix)").stdout.strip() == venv


def test_venv_is_a_complete_release(host, venv):
    """The venv path is a link to a release venv that was verified and marked complete."""
    if not host.file(venv).is_symlink:
        pytest.skip("the venv is a folder (made by the build tools alone, or an earlier layout)")
    assert host.file(f"{venv}/.sglang-lxc-release.json").is_file
    assert host.file(f"{venv}/bin/python").exists


def test_locked_stack_imports(host, venv):
    if installed(host, venv, "sglang") is None:
        pytest.skip("sglang is not installed in this venv (stack disabled)")
    res = py(host, venv, "import sglang, torch, flashinfer; print(torch.__version__)")
    assert res.rc == 0, res.stderr


# where role wheelhouse puts uv's binary, one folder per pinned version (roles/wheelhouse/vars)
UV_GLOB = "/usr/local/lib/sglang-lxc/uv-*/uv"


def test_stack_dependencies_consistent(host, venv):
    """Every installed distribution's requirements are met, by the check of the installer that
    made the release: uv's (a uv-built venv has no pip), or pip's where the venv has pip."""
    if installed(host, venv, "sglang") is None:
        pytest.skip("sglang is not installed in this venv (stack disabled)")
    uv = host.run(f"ls -1 {UV_GLOB} 2>/dev/null | sort -V | tail -n 1").stdout.strip()
    if installed(host, venv, "pip") is None and uv:
        res = host.run(f"{uv} pip check --python {venv}/bin/python")
    else:
        res = host.run(f"{venv}/bin/python -m pip check --disable-pip-version-check")
    assert res.rc == 0, res.stdout + res.stderr


def _stamp(host, venv):
    f = host.file(f"{venv}/.sglang-lxc/sgl-kernel.json")
    if not f.exists:
        pytest.skip("no sgl-kernel source build on this host")
    return json.loads(f.content_string)


def test_built_kernel_is_the_installed_one(host, venv):
    stamp = _stamp(host, venv)
    wheel = stamp["wheel"]
    dist = wheel.split("-")[0].replace("_", "-")
    assert installed(host, venv, dist) == stamp["version"]


def test_built_kernel_imports(host, venv):
    _stamp(host, venv)
    res = py(host, venv, "import sgl_kernel")
    assert res.rc == 0, res.stderr


def test_build_flags_are_sm120_only(host, venv):
    inputs = _stamp(host, venv)["inputs"]
    assert inputs["cuda_archs"] == ["12.0"]
    assert "-DENABLE_BELOW_SM90=OFF" in inputs["cmake_args"]
    assert "-DSGL_KERNEL_ENABLE_FA3=OFF" in inputs["cmake_args"]
