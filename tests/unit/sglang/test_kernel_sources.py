"""The controller's sgl-kernel sources (plugins/action/sglang_kernel_sources.py): the fixture's
FetchContent pins fetched offline from local git repositories through git's url.<base>.insteadOf,
exported into the source cache at the pinned commits, and a missing one named before any build.
Real git, real repositories (tests/kernel_fixture.py), no network.
"""

from __future__ import annotations

import os
import subprocess
import tarfile
from pathlib import Path

import pytest
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import git_rewrites as rewrites

from tests.kernel_fixture import FIXTURE, URL_PREFIX, make_dep_repos, url_rewrites
from tests.loaders import ROOT, load_file

ACTION = ROOT / "plugins/action/sglang_kernel_sources.py"
sources = load_file("sglang_kernel_sources_action", ACTION)

ARGS = [
    "-DENABLE_BELOW_SM90=OFF",
    "-DSGL_KERNEL_ENABLE_FA3=OFF",
    "-DCMAKE_POLICY_VERSION_MINIMUM=3.5",
]


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    dest = tmp_path_factory.mktemp("repos")
    return dest, make_dep_repos(dest)


def test_the_fixture_pins_the_commits_its_repositories_have(repos):
    _, commits = repos
    text = (FIXTURE / "CMakeLists.txt").read_text()
    for name in ("fixture-headers", "fixture-comm"):
        assert commits[name] in text, f"update the pin of {name} to {commits[name]}"


def test_every_pin_is_fetched_offline_through_the_rewrite(repos, tmp_path):
    dest, commits = repos
    cache = tmp_path / "cache"
    copy = cache / "build-copies" / "x"
    record = sources.make_build_copy(str(FIXTURE), str(copy), ["12.0"], sources.options_off(ARGS))
    assert {t["target"] for t in record["left_out"]} == {
        "common_ops_sm90_build",
        "flash_ops",
        "fixture_mla_ops",
    }
    env = rewrites.git_url_rewrite_env(url_rewrites(dest))
    found = sources.collect(str(copy), str(cache), env, fetch=True)
    assert found["missing"] == []
    got = {d["name"]: os.path.basename(d["folder"]) for d in found["deps"]}
    headers, comm_commit = commits["fixture-headers"], commits["fixture-comm"]
    assert got == {
        "repo-fixture-headers": f"repo-fixture-headers-{headers}",
        "repo-fixture-comm": f"repo-fixture-comm-{comm_commit}",
        "fixture-config": "fixture-config-v1.0",  # mscclpp-style: the dependency's own pin
    }
    comm = next(d for d in found["deps"] if d["name"] == "repo-fixture-comm")
    pin = (Path(comm["folder"]) / ".sglang-lxc-pin").read_text().split()
    assert pin == [
        f"{URL_PREFIX}fixture-comm.git",
        commits["fixture-comm"],
        commits["fixture-comm"],
    ]
    assert os.path.isfile(os.path.join(comm["folder"], "src", "comm.cu"))
    # the MLA library's pin (a file the build copy no longer includes) is not needed
    assert "repo-fixture-mla" not in got

    archive = tmp_path / "a.tar.gz"
    sources.pack(comm["folder"], str(archive))
    with tarfile.open(archive) as tar:
        assert "src/comm.cu" in tar.getnames()


def test_a_missing_dependency_names_repository_commit_and_folder(tmp_path):
    cache = tmp_path / "cache"
    copy = cache / "build-copies" / "x"
    sources.make_build_copy(str(FIXTURE), str(copy), ["12.0"], [])
    env = rewrites.git_url_rewrite_env({})  # no mirror: git.invalid does not resolve
    found = sources.collect(str(copy), str(cache), env, fetch=True)
    assert found["deps"] == []
    names = [m["name"] for m in found["missing"]]
    assert names == ["repo-fixture-headers", "repo-fixture-comm"]
    message = sources.missing_message(found["missing"])
    assert message.startswith("sgl-kernel: 2 FetchContent dependencies are not in the controller's")
    headers = found["missing"][0]
    assert f"{URL_PREFIX}fixture-headers.git at {headers['ref']}" in message
    assert f"Fill {cache}/deps/repo-fixture-headers-{headers['ref']} with the files" in message
    assert "(CMakeLists.txt:26)" in message  # the tree's line: the copy keeps them


def test_a_corrupt_mirror_is_named_by_the_remote_lines_and_the_last_fatal(tmp_path):
    """A blob missing on the serving side: the remote's line says why, not 'bad pack header'."""
    dest = tmp_path / "repos"
    commits = make_dep_repos(dest)
    bare = dest / "fixture-headers.git"
    path = f"{commits['fixture-headers']}:include/fixture_headers/math.cuh"
    blob = subprocess.run(
        ["git", "-C", str(bare), "rev-parse", path], capture_output=True, text=True, check=True
    ).stdout.strip()
    (bare / "objects" / blob[:2] / blob[2:]).unlink()
    cache = tmp_path / "cache"
    copy = cache / "build-copies" / "x"
    sources.make_build_copy(str(FIXTURE), str(copy), ["12.0"], [])
    env = rewrites.git_url_rewrite_env(url_rewrites(dest))
    found = sources.collect(str(copy), str(cache), env, fetch=True)
    headers = next(m for m in found["missing"] if m["name"] == "repo-fixture-headers")
    assert f"remote: fatal: unable to read {blob}" in headers["error"]
    said = headers["error"].split(" / ")
    # the remote's lines, then git's last fatal (upload-pack's and the client's come in either
    # order: two processes write them)
    assert said[0] == f"remote: fatal: unable to read {blob}"
    assert "remote: aborting due to possible repository corruption on the remote side." in said
    assert said[-1].startswith("fatal: ") and len(said) == 3, said
    assert "\x00" not in headers["error"]
    assert f"unable to read {blob}" in sources.missing_message(found["missing"])


def test_rewrites_are_gits_own_insteadof():
    assert rewrites.git_url_rewrite_env({"file:///m/": "https://github.com/"}) == {
        "GIT_TERMINAL_PROMPT": "0",
        "GIT_CONFIG_COUNT": "1",
        "GIT_CONFIG_KEY_0": "url.file:///m/.insteadOf",
        "GIT_CONFIG_VALUE_0": "https://github.com/",
    }
    assert sources.options_off(ARGS) == ["ENABLE_BELOW_SM90", "SGL_KERNEL_ENABLE_FA3"]
