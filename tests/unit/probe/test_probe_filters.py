"""The filters that feed state_probe: cuda_toolkit's input checks and the deploy record."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import yaml
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import cuda_toolkit as cuda
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import deploy_record as record
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import (
    state_probe_checks as builders,
)

ROOT = Path(__file__).resolve().parents[3]

DEFAULTS = yaml.safe_load((ROOT / "roles/cuda_toolkit/defaults/main.yml").read_text())
COMPONENTS = yaml.safe_load((ROOT / "roles/cuda_toolkit/vars/main.yml").read_text())[
    "__cuda_toolkit_components"]


def settings(**kw):
    base = {
        "version": DEFAULTS["cuda_toolkit_version"],
        "source": "wheels",
        "releases": DEFAULTS["cuda_toolkit_releases"],
        "overrides": {},
        "components": COMPONENTS,
        "system_root": "",
        "paths": {"cuda_toolkit_prefix": "/opt/sglang/cuda"},
    }
    return {**base, **kw}


def test_the_defaults_are_sound():
    assert cuda.cuda_toolkit_problems(settings()) == []
    for version in DEFAULTS["cuda_toolkit_releases"]:
        assert cuda.cuda_toolkit_problems(settings(version=version)) == []


def test_unknown_version_names_the_known_ones_and_stops_there():
    out = cuda.cuda_toolkit_problems(settings(version="13.9"))
    assert out == [
        "cuda_toolkit_version '13.9' is not a known CUDA release: use one of 13.0, 13.1, 13.2 "
        "(quoted, major.minor), or add its exact wheel versions to cuda_toolkit_releases."
    ]
    assert "cuda_toolkit_version '13'" in cuda.cuda_toolkit_problems(settings(version="13"))[0]


def test_incomplete_release_and_off_version_override():
    out = cuda.cuda_toolkit_problems(settings(
        releases={"13.0": {"nvidia-cuda-runtime": "13.0.96", "nvidia-cuda-nvcc": "13.0.88"}},
        overrides={"nvidia-cuda-nvcc": "13.5.37", "nvidia-foo": "13.0.1"},
    ))
    assert out[0] == (
        "cuda_toolkit_releases['13.0'] plus cuda_toolkit_wheel_overrides must name exactly "
        "nvidia-cuda-runtime, nvidia-cuda-nvcc, nvidia-cuda-cccl, nvidia-cuda-crt, nvidia-nvvm; "
        "missing: nvidia-cuda-cccl, nvidia-cuda-crt, nvidia-nvvm; unknown: nvidia-foo."
    )
    assert out[1].startswith(
        "cuda_toolkit_wheel_overrides['nvidia-cuda-nvcc'] is '13.5.37', not on cuda_toolkit_version"
    )
    assert len(out) == 2


def test_cuobjdump_is_on_the_releases_major():
    for version, reader in DEFAULTS["cuda_toolkit_cuobjdump_versions"].items():
        assert cuda.cuda_toolkit_problems(settings(version=version, cuobjdump=reader)) == []
    assert cuda.cuda_toolkit_problems(settings(cuobjdump="12.9.86")) == [
        "cuda_toolkit_cuobjdump_versions['13.0'] is '12.9.86', not on CUDA 13: cuobjdump reads "
        "the cubins of its own major."
    ]


def test_paths_and_system_root():
    out = cuda.cuda_toolkit_problems(settings(
        source="system", system_root="usr/local/cuda",
        paths={"cuda_toolkit_env_file": "etc/cuda.env"}))
    assert out == [
        "cuda_toolkit_env_file must be an absolute path, got 'etc/cuda.env'.",
        "cuda_toolkit_source is 'system' but cuda_toolkit_system_root is not an absolute path "
        "('usr/local/cuda').",
    ]
    # system mode accepts a version the release table does not know
    assert cuda.cuda_toolkit_problems(settings(source="system", version="12.9",
                                               system_root="/usr/local/cuda")) == []


def test_record_body_matches_what_the_role_wrote_before():
    inputs = {"source": "wheels", "prefix": "/opt/sglang/cuda", "env_file": "/etc/sglang/cuda.env"}
    body = record.deploy_record_body("cuda_toolkit", "deployed", " ", "13.0", inputs)
    # Ansible's to_json(sort_keys=true) | hash('sha256'), as the role's Jinja computed it
    digest = hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()
    assert body == {"role": "cuda_toolkit", "status": "deployed", "reason": "", "version": "13.0",
                    "inputs_sha256": digest}
    assert record.deploy_record_body("x")["inputs_sha256"] == hashlib.sha256(b"{}").hexdigest()
    assert "published" not in record.deploy_record_body("x")  # records of before, unchanged
    targets = [{"targets": ["127.0.0.1:30000"], "labels": {"job": "sglang"}}]
    shown = record.deploy_record_body("sglang_serve", published={"prometheus_targets": targets})
    assert shown["published"] == {"prometheus_targets": targets}  # as it is, not a digest


def test_record_concern_checks_folder_and_record_but_not_the_time():
    body = record.deploy_record_body("sglang_serve", "skipped", "no GPU")
    concern = record.deploy_record_concern(body, "/etc/sglang/deployed")
    assert concern["name"] == "record"
    assert concern["paths"][0]["path"] == "/etc/sglang/deployed"
    assert concern["records"] == [{
        "path": "/etc/sglang/deployed/sglang_serve.json", "equal": body, "ignore": ["time"],
        "mode": "0644", "owner": "root", "group": "root"}]


def test_builders_of_checks():
    assert builders.probe_paths(["/var/lib/sglang", "/var/cache/sglang"], owner="sglang",
                                group="sglang", mode="0750") == [
        {"path": "/var/lib/sglang", "state": "directory", "owner": "sglang", "group": "sglang",
         "mode": "0750"},
        {"path": "/var/cache/sglang", "state": "directory", "owner": "sglang",
         "group": "sglang", "mode": "0750"},
    ]
    assert builders.probe_paths(["/x"], state="file") == [{"path": "/x", "state": "file"}]
    assert builders.probe_services(["sglang@gpu0.service"]) == [
        {"name": "sglang@gpu0.service", "enabled": True, "active": True}]
