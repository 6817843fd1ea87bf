"""cuda_toolkit on real lab containers (no GPU, no route to package registries).

Wheels reach the containers only through the controller wheelhouse. The session uses a fresh
wheelhouse (``SGLANG_LXC_TEST_WHEELHOUSE`` reuses one) so the bytes downloaded are measured from
zero; the figures are written to ``artifacts/cuda-toolkit-lab.json``.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path

import pytest

from tests.lablib import REPO

pytestmark = pytest.mark.lab

VMID = 220
SECOND_VMID = 221
PLAYBOOK = "playbooks/toolchain.yml"
VERSION = "13.0"  # inventory/lab/group_vars/sglang_servers/cuda.yml
OTHER_VERSION = "13.2"
PREFIX = "/opt/sglang/cuda"
ENV_FILE = "/etc/sglang/cuda.env"
INFRA = "tests/infra/test_cuda_toolkit.py"

METRICS: dict[str, object] = {}


@pytest.fixture(scope="module")
def wheelhouse(tmp_path_factory) -> Path:
    reuse = os.environ.get("SGLANG_LXC_TEST_WHEELHOUSE")
    return Path(reuse) if reuse else tmp_path_factory.mktemp("wheelhouse")


@pytest.fixture(scope="module")
def extra(wheelhouse) -> dict:
    return {"sglang_lxc_wheelhouse": str(wheelhouse)}


@pytest.fixture(scope="module")
def ct(lab_container):
    yield lab_container(VMID)
    out = REPO / "artifacts" / "cuda-toolkit-lab.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(METRICS, indent=2) + "\n")
    print(f"\ncuda_toolkit lab figures: {json.dumps(METRICS)}")


def wheel_bytes(root: Path) -> int:
    return sum(p.stat().st_size for p in root.rglob("*.whl"))


def sh(ct, command: str) -> str:
    return ct.exec("sh", "-c", command).stdout.strip()


def state(ct) -> str:
    """What a failed or check-mode run must leave as it was."""
    return sh(
        ct,
        f"ls -la {PREFIX} 2>&1; cat {ENV_FILE} 2>&1; "
        f"find {PREFIX} -maxdepth 6 -type l -printf '%p -> %l\\n' 2>/dev/null | sort",
    )


def timed_run(ct, **kwargs):
    start = time.monotonic()
    result = ct.run_playbook(PLAYBOOK, **kwargs)
    return result, round(time.monotonic() - start, 1)


def run_infra(ct, monkeypatch, version: str) -> None:
    monkeypatch.setenv("SGLANG_LXC_CUDA_VERSION", version)
    proc = ct.testinfra(INFRA)
    assert proc.returncode == 0, proc.stdout[-8000:] + proc.stderr[-2000:]
    assert " passed" in proc.stdout and "failed" not in proc.stdout


@pytest.mark.parametrize(
    ("bad", "named"),
    [
        ({"cuda_toolkit_version": "13.9"}, "cuda_toolkit_version"),
        ({"cuda_toolkit_version": "13"}, "cuda_toolkit_version"),
        (
            {"cuda_toolkit_wheel_overrides": {"nvidia-cuda-nvcc": "13.5.37"}},
            "cuda_toolkit_wheel_overrides",
        ),
        (
            {
                "cuda_toolkit_releases": {
                    "13.0": {"nvidia-cuda-runtime": "13.0.96", "nvidia-cuda-nvcc": "13.0.88"}
                }
            },
            "cuda_toolkit_releases",
        ),
        ({"cuda_toolkit_source": "conda"}, "cuda_toolkit_source"),
        (
            {"cuda_toolkit_source": "system", "cuda_toolkit_system_root": "/usr/local/cuda-13.0"},
            "cuda_toolkit_system_root",
        ),
    ],
    ids=[
        "unknown-version",
        "not-major-minor",
        "nvcc-13.5-with-13.0",
        "incomplete-release",
        "unknown-source",
        "system-root-missing",
    ],
)
def test_bad_input_is_rejected_before_any_change(ct, extra, wheelhouse, bad, named):
    before, downloaded = state(ct), wheel_bytes(wheelhouse)
    result = ct.run_playbook(PLAYBOOK, extra_vars={**extra, **bad})
    assert result.rc != 0, str(result)
    assert named in result.output, str(result)
    assert result.changed == 0, str(result)
    assert state(ct) == before
    assert wheel_bytes(wheelhouse) == downloaded


def test_converge(ct, extra, wheelhouse):
    result, seconds = timed_run(ct, extra_vars=extra)
    assert result.rc == 0, str(result)
    assert result.changed > 0
    METRICS["first_container_bytes_downloaded"] = wheel_bytes(wheelhouse)
    METRICS["first_run_seconds"] = seconds


def test_converged_container_passes_the_infra_checks(ct, monkeypatch):
    run_infra(ct, monkeypatch, VERSION)


def test_second_run_changes_nothing(ct, extra):
    result, seconds = timed_run(ct, extra_vars=extra)
    assert result.rc == 0, str(result)
    assert result.changed == 0, str(result)
    METRICS["rerun_seconds"] = seconds


def test_check_mode_changes_nothing(ct, extra, wheelhouse):
    before, downloaded = state(ct), wheel_bytes(wheelhouse)
    result = ct.run_playbook(PLAYBOOK, extra_vars=extra, check=True)
    assert result.rc == 0, str(result)
    assert result.changed == 0, str(result)
    # a pending version change is reported, neither downloaded nor applied
    result = ct.run_playbook(
        PLAYBOOK, extra_vars={**extra, "cuda_toolkit_version": OTHER_VERSION}, check=True
    )
    assert result.rc == 0, str(result)
    assert result.changed > 0, str(result)
    assert state(ct) == before
    assert wheel_bytes(wheelhouse) == downloaded


def test_one_drifted_concern_is_reported_by_check_mode_then_repaired_alone(ct, extra):
    """A removed libcudart link and a hand-edited env file: the probe names the links and env
    concerns, check mode reports both (with the env file's diff) and changes nothing, the run
    includes only those two concerns and repairs them, and the rerun changes nothing."""
    lib = f"{PREFIX}/current/nvidia/cu13/lib/libcudart.so"
    sh(ct, f"rm {lib} && echo '# edited by hand' >> {ENV_FILE}")
    before = state(ct)
    check = ct.run_playbook(PLAYBOOK, extra_vars=extra, check=True, args=["--diff"])
    assert check.rc == 0 and check.changed == 2, str(check)
    assert "-# edited by hand" in check.output, str(check)
    assert state(ct) == before
    result = ct.run_playbook(PLAYBOOK, extra_vars=extra)
    assert result.rc == 0 and result.changed == 2, str(result)
    assert re.findall(r"included: \S+/cuda_toolkit/tasks/(\w+)\.yml", result.output) == [
        "links",
        "env",
    ], str(result)
    assert sh(ct, f"readlink {lib}") == "libcudart.so.13"
    assert "edited" not in sh(ct, f"cat {ENV_FILE}")
    again = ct.run_playbook(PLAYBOOK, extra_vars=extra)
    assert again.rc == 0 and again.changed == 0, str(again)
    assert "included:" not in again.output, str(again)


def test_second_container_downloads_nothing(lab_container, extra, wheelhouse):
    downloaded = wheel_bytes(wheelhouse)
    second = lab_container(SECOND_VMID)
    try:
        result, seconds = timed_run(second, extra_vars=extra)
        assert result.rc == 0, str(result)
        assert wheel_bytes(wheelhouse) == downloaded
        METRICS["second_container_bytes_downloaded"] = wheel_bytes(wheelhouse) - downloaded
        METRICS["second_container_first_run_seconds"] = seconds
        version = sh(second, f". {ENV_FILE}; $CUDA_HOME/bin/nvcc --version")
        assert f"release {VERSION}," in version
    finally:
        second.destroy()


def test_overlay_refuses_to_replace_a_different_folder(ct, extra):
    include = f"{PREFIX}/current/nvidia/cu13/include"
    sh(ct, f"rm {include}/cub && mkdir {include}/cub && echo '#error' > {include}/cub/cub.cuh")
    try:
        result = ct.run_playbook(PLAYBOOK, extra_vars=extra)
        assert result.rc != 0, str(result)
        # the module works on the release folder that current points to
        assert re.search(
            r"refusing to replace /\S+/nvidia/cu13/include/cub: a folder whose content differs",
            " ".join(result.output.split()),
        ), str(result)
        assert sh(ct, f"cat {include}/cub/cub.cuh") == "#error"
    finally:
        sh(ct, f"rm -r {include}/cub")
    result = ct.run_playbook(PLAYBOOK, extra_vars=extra)
    assert result.rc == 0, str(result)
    assert sh(ct, f"readlink {include}/cub") == "cccl/cub"


def test_version_change_leaves_no_stale_link(ct, extra, wheelhouse, monkeypatch):
    downloaded = wheel_bytes(wheelhouse)
    other = {**extra, "cuda_toolkit_version": OTHER_VERSION}
    result, seconds = timed_run(ct, extra_vars=other)
    assert result.rc == 0, str(result)
    METRICS["version_change_bytes_downloaded"] = wheel_bytes(wheelhouse) - downloaded
    METRICS["version_change_seconds"] = seconds
    run_infra(ct, monkeypatch, OTHER_VERSION)  # includes: no dangling link, one release only
    result = ct.run_playbook(PLAYBOOK, extra_vars=other)
    assert result.rc == 0 and result.changed == 0, str(result)
    # and back: the CUDA_HOME the services read never changes
    home = sh(ct, f". {ENV_FILE}; echo $CUDA_HOME")
    result = ct.run_playbook(PLAYBOOK, extra_vars=extra)
    assert result.rc == 0, str(result)
    assert sh(ct, f". {ENV_FILE}; echo $CUDA_HOME") == home
    assert sh(ct, f"find {PREFIX} -xtype l") == ""
    releases = sh(ct, f"ls -1 {PREFIX}").split()
    assert len(releases) == 2 and "current" in releases
    assert sh(ct, f"readlink {PREFIX}/current").startswith(f"{VERSION}-")
    assert "V13.0.88" in sh(ct, f". {ENV_FILE}; $CUDA_HOME/bin/nvcc --version")


def test_system_toolkit_gets_only_overlay_links_and_env(ct, extra, monkeypatch):
    root = "/usr/local/cuda-13.0"
    # a toolkit installed outside the role: the wheel tree without the overlay and links
    sh(
        ct,
        f"rm -rf {root} && cp -a {PREFIX}/current/nvidia/cu13 {root} && cd {root} && "
        "rm include/cub include/thrust include/cuda lib64 lib/libcudart.so lib/libnvvm.so",
    )
    system = {**extra, "cuda_toolkit_source": "system", "cuda_toolkit_system_root": root}
    try:
        result = ct.run_playbook(PLAYBOOK, extra_vars=system)
        assert result.rc == 0, str(result)
        assert sh(ct, f". {ENV_FILE}; echo $CUDA_HOME") == root
        assert sh(ct, f"readlink {root}/include/cub; readlink {root}/lib/libcudart.so").split() == [
            "cccl/cub",
            "libcudart.so.13",
        ]
        monkeypatch.setenv("SGLANG_LXC_CUDA_SOURCE", "system")
        run_infra(ct, monkeypatch, VERSION)
        result = ct.run_playbook(PLAYBOOK, extra_vars=system)
        assert result.rc == 0 and result.changed == 0, str(result)
    finally:
        result = ct.run_playbook(PLAYBOOK, extra_vars=extra)
        sh(ct, f"rm -rf {root}")
    assert result.rc == 0, str(result)
    assert sh(ct, f". {ENV_FILE}; echo $CUDA_HOME") == f"{PREFIX}/current/nvidia/cu13"
