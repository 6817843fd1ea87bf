"""The controller's sgl-kernel source cache shared by concurrent runs
(plugins/plugin_utils/sgl_kernel_cache.py, through plugins/action/sglang_kernel_sources.py):
the lock around fetch and checkout, a stale lock from a killed run, pruning of old build copies,
one build copy per architecture set. Real git on the fixture's dependencies
(tests/kernel_fixture.py), real processes, real Ansible for the per-host copies; no network.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from tests.kernel_fixture import FIXTURE, make_dep_repos, url_rewrites
from tests.loaders import ROOT, load_file

cache_mod = load_file("sgl_kernel_cache", ROOT / "plugins/plugin_utils/sgl_kernel_cache.py")

# One run: the action's own sequence (lock; build copy; every pin fetched; archives), as a
# process of its own, printing what it says and, at the end, what it found.
RUN = textwrap.dedent(
    """
    import functools, json, os, sys
    sys.path[:0] = [{root!r}, {root!r} + "/.collections"]
    from tests.loaders import load_file
    sources = load_file("sources", {action!r})
    from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import git_rewrites
    from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import sgl_kernel_cache as c
    cache, rewrites, archs = sys.argv[1], json.loads(sys.argv[2]), sys.argv[3].split(",")
    say = lambda text: print(text, flush=True)
    if sys.argv[5:] == ["hold"]:
        # held mid-run: at its first half-made folder, made but not yet renamed into place, the
        # run says so and waits, holding the lock, for a line on stdin (or to be killed)
        rename = os.rename
        def held_rename(src, dst, **kw):
            if str(src).endswith(".partial"):
                os.rename = rename
                say("HOLDING " + str(src))
                sys.stdin.readline()
            return rename(src, dst, **kw)
        os.rename = held_rename
    with c.locked(cache, 120, say, "run " + sys.argv[4], poll=0.2) as lock:
        copy = os.path.join(cache, "build-copies", "copy-" + "-".join(archs))
        sources.make_build_copy({fixture!r}, copy, archs, [])
        env = git_rewrites.git_url_rewrite_env(rewrites)
        fetcher = functools.partial(sources.fetch_dep, fd=lock["fd"])
        found = sources.collect(copy, cache, env, fetch=True, fetcher=fetcher)
        for dep in found["deps"]:
            sources.pack(dep["folder"], os.path.join(cache, "archives", "dep-"
                         + os.path.basename(dep["folder"]) + ".tar.gz"))
    print("FOUND " + json.dumps(found), flush=True)
    """
).format(
    root=str(ROOT), action=str(ROOT / "plugins/action/sglang_kernel_sources.py"),
    fixture=str(FIXTURE),
)  # fmt: skip


@pytest.fixture(scope="module")
def repos(tmp_path_factory):
    dest = tmp_path_factory.mktemp("repos")
    make_dep_repos(dest)
    return dest


def start(
    cache: Path, repos: Path, name: str, archs: str = "12.0", hold: bool = False
) -> subprocess.Popen:
    """One run; ``hold``: it stops, holding the lock, at its first half-made folder (it prints
    ``HOLDING <folder>``) until a line on its stdin lets it go on, or it is killed."""
    return subprocess.Popen(
        [sys.executable, "-c", RUN, str(cache), json.dumps(url_rewrites(repos)), archs, name]
        + (["hold"] if hold else []),
        stdin=subprocess.PIPE if hold else None,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )


def holder_of(cache: Path) -> dict:
    try:
        text = (cache / cache_mod.LOCK_NAME).read_text().strip()
        return json.loads(text) if text else {}
    except (FileNotFoundError, ValueError):
        return {}


def first_line(proc: subprocess.Popen, prefix: str, timeout: float = 60) -> str:
    """The first line the process prints that starts with prefix (warnings may come first)."""
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        ready, _, _ = select.select([proc.stdout], [], [], max(0.0, end - time.monotonic()))
        if not ready:
            break
        line = proc.stdout.readline()
        if not line:
            break
        if line.startswith(prefix):
            return line
    raise AssertionError(f"no line starting with {prefix!r}")


def found_of(output: str) -> dict:
    line = next(ln for ln in output.splitlines() if ln.startswith("FOUND "))
    return json.loads(line[len("FOUND ") :])


def test_a_second_run_waits_naming_the_lock_and_the_run_holding_it(repos, tmp_path):
    cache = tmp_path / "cache"
    first = start(cache, repos, "A", hold=True)
    try:
        first_line(first, "HOLDING ")  # A holds the lock, mid-run, until it is told to go on
        held = holder_of(cache).get("pid") == first.pid
        second = start(cache, repos, "B")
        line = first_line(second, "sgl-kernel sources: waiting")
    finally:
        first.stdin.write("go on\n")
        first.stdin.flush()
    lock = cache / cache_mod.LOCK_NAME
    assert line.startswith(f"sgl-kernel sources: waiting for the source cache lock {lock}, ")
    assert f"held by pid {first.pid} on {socket.gethostname()} (started " in line
    assert "UTC, run A)" in line
    out_a, _ = first.communicate(timeout=60)
    out_b, _ = second.communicate(timeout=60)
    assert (first.returncode, second.returncode) == (0, 0), out_a + out_b
    a, b = found_of(out_a), found_of(out_b)
    assert a["missing"] == b["missing"] == []
    assert [d["folder"] for d in a["deps"]] == [d["folder"] for d in b["deps"]]
    assert len(a["deps"]) == 3
    assert holder_of(cache) == {}  # released
    assert held  # the first run was seen holding it


def test_a_stale_lock_from_a_killed_run_is_taken_over(repos, tmp_path):
    cache = tmp_path / "cache"
    killed = start(cache, repos, "killed", hold=True)
    try:
        half = Path(first_line(killed, "HOLDING ").split(" ", 1)[1].strip())
        assert half.is_dir()  # its half-made folder, left mid-run
        assert holder_of(cache)["pid"] == killed.pid  # it holds the lock until it is killed
    finally:
        os.kill(killed.pid, signal.SIGKILL)
        killed.communicate(timeout=30)
    assert holder_of(cache)["pid"] == killed.pid  # its record stays: it never released
    after = start(cache, repos, "after")
    out, _ = after.communicate(timeout=120)
    assert after.returncode == 0, out
    assert (
        f"took over the source cache lock {cache / cache_mod.LOCK_NAME} left by pid "
        f"{killed.pid} on {socket.gethostname()} (started "
    ) in out
    assert "run killed)" in out and "(killed); removed its 1 half-made folder(s)" in out
    assert not half.exists()
    found = found_of(out)
    assert found["missing"] == [] and len(found["deps"]) == 3
    for dep in found["deps"]:
        assert (Path(dep["folder"]) / ".sglang-lxc-pin").is_file()
    assert not [p for p in cache.rglob("*.partial*")]  # the killed run's half-made folders


def make_copy(cache: Path, name: str, size: int, used: float) -> Path:
    copy = cache / "build-copies" / name
    copy.mkdir(parents=True)
    (copy / "tree.bin").write_bytes(os.urandom(size))
    (copy / cache_mod.RECORD).write_text("{}")
    os.utime(copy / cache_mod.RECORD, (used, used))
    archive = cache / "archives" / f"sgl-kernel-{name}.tar.gz"
    archive.parent.mkdir(exist_ok=True)
    archive.write_bytes(os.urandom(size))
    return copy


def test_prune_keeps_the_newest_and_the_one_in_use(tmp_path):
    cache = tmp_path / "cache"
    now = time.time()
    old_in_use = make_copy(cache, "a-old-in-use", 64 * 1024, now - 400)
    newest = make_copy(cache, "b-newest", 64 * 1024, now - 10)
    make_copy(cache, "c-older", 64 * 1024, now - 300)
    make_copy(cache, "d-oldest", 128 * 1024, now - 500)
    (cache / "deps" / "repo-x-1").mkdir(parents=True)  # dependencies are shared: never pruned
    pruned = cache_mod.prune(str(cache), 2, [str(old_in_use)])
    assert sorted(os.path.basename(p) for p in pruned["removed"]) == ["c-older", "d-oldest"]
    assert pruned["kept"] == sorted([str(old_in_use), str(newest)])
    assert sorted(p.name for p in (cache / "archives").iterdir()) == [
        "sgl-kernel-a-old-in-use.tar.gz",
        "sgl-kernel-b-newest.tar.gz",
    ]
    assert pruned["freed_bytes"] >= 2 * (64 + 128) * 1024  # the trees and their archives
    assert (cache / "deps" / "repo-x-1").is_dir()
    assert cache_mod.human(pruned["freed_bytes"]).endswith("KiB")
    # more copies in use than kept: all of them stay
    again = cache_mod.prune(str(cache), 1, [str(old_in_use), str(newest)])
    assert again["removed"] == [] and again["freed_bytes"] == 0


def ansible_env() -> dict:
    return {
        **os.environ,
        "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
        "ANSIBLE_NOCOLOR": "1",
    }


def test_one_build_copy_per_architecture_set(repos, tmp_path):
    """Three hosts of one run (forks in parallel, all on the one cache): the two that ask for
    12.0 share a copy; the one that asks for 9.0 gets its own, with its own configured-build
    check; then a successful build's pruning keeps both copies in use."""
    cache = tmp_path / "cache"
    stale = make_copy(cache, "0000-stale", 4096, time.time() - 3600)
    inventory = tmp_path / "hosts.yml"
    hosts = {"ws1": ["12.0"], "ws2": ["12.0"], "h200": ["9.0"]}
    inventory.write_text(
        json.dumps(
            {
                "all": {
                    "hosts": {
                        h: {"sglang_kernel_cuda_archs": a, "ansible_connection": "local"}
                        for h, a in hosts.items()
                    },
                    "vars": {"ansible_python_interpreter": sys.executable},
                }
            }
        )
    )
    out = tmp_path / "out"
    playbook = tmp_path / "play.yml"
    playbook.write_text(
        textwrap.dedent(
            f"""
            - hosts: all
              gather_facts: false
              tasks:
                - sglang_lxc.serving.sglang_kernel_sources:
                    source_tree: {FIXTURE}
                    cache_dir: {cache}
                    work_dir: /opt/sglang/build/sgl-kernel
                    cuda_archs: "{{{{ sglang_kernel_cuda_archs }}}}"
                    git_url_rewrites: {json.dumps(url_rewrites(repos))}
                  register: __sources
                - sglang_lxc.serving.sglang_kernel_sources:
                    cache_dir: {cache}
                    prune_keep: 1
                    in_use: "{{{{ ansible_play_hosts | map('extract', hostvars, ['__sources',
                      'build_copy']) | list }}}}"
                  register: __pruned
                  run_once: true
                - ansible.builtin.copy:
                    content: "{{{{ {{'pruned': __pruned}} | combine(dict(ansible_play_hosts
                      | zip(ansible_play_hosts | map('extract', hostvars, '__sources'))))
                      | to_json }}}}"
                    dest: "{out}.json"
                    mode: "0644"
                  run_once: true
                  delegate_to: localhost
            """
        )
    )
    proc = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-playbook"), "-i", str(inventory), "-f", "3",
         str(playbook)],
        capture_output=True, text=True, env=ansible_env(), cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    got = json.loads(Path(f"{out}.json").read_text())
    assert got["ws1"]["build_copy"] == got["ws2"]["build_copy"] != got["h200"]["build_copy"]
    assert got["ws1"]["check_args"].startswith("--allow sm_120a --search")
    assert got["h200"]["check_args"].startswith("--allow sm_90 --search")
    assert got["ws1"]["archive"] != got["h200"]["archive"]
    for copy, gencode in ((got["ws1"]["build_copy"], "sm_120a"), (got["h200"]["build_copy"],
                          "sm_90")):  # fmt: skip
        text = (Path(copy) / "CMakeLists.txt").read_text()
        assert gencode in text
    pruned = got["pruned"]
    assert pruned["removed"] == [str(stale)]
    assert sorted(pruned["kept"]) == sorted({got[h]["build_copy"] for h in hosts})
    assert pruned["msg"].startswith("pruned 1 old build copy (") and "kept 2" in pruned["msg"]
