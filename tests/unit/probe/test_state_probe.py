"""state_probe: drift per concern from real files in a temporary folder (read-only)."""

from __future__ import annotations

import hashlib
import json
import os
import pwd
import sys
from pathlib import Path

import pytest
from ansible_collections.sglang_lxc.serving.plugins.module_utils import cuda_links
from ansible_collections.sglang_lxc.serving.plugins.module_utils import state_probe as sp

ME = pwd.getpwuid(os.getuid()).pw_name


def sha1(text: str) -> str:
    return hashlib.sha1(text.encode()).hexdigest()


def no_commands(argv):
    raise AssertionError(f"no command expected, got {argv}")


def probe(concerns, **kw):
    kw.setdefault("runner", no_commands)
    return sp.probe(concerns, **kw)


def snapshot(root: Path) -> list[tuple[str, int, float]]:
    return sorted((str(p), p.lstat().st_mode, p.lstat().st_mtime) for p in root.rglob("*"))


def test_paths_by_state_mode_and_owner(tmp_path):
    (tmp_path / "d").mkdir(mode=0o755)
    (tmp_path / "f").write_text("x")
    (tmp_path / "f").chmod(0o600)
    (tmp_path / "l").symlink_to("d")
    concern = {
        "name": "paths",
        "paths": [
            {"path": str(tmp_path / "d"), "state": "directory", "mode": "0755", "owner": ME},
            {"path": str(tmp_path / "f"), "state": "file", "mode": "0600"},
            {"path": str(tmp_path / "l"), "state": "link", "target": "d"},
            {"path": str(tmp_path / "gone"), "state": "absent"},
        ],
    }
    assert probe([concern]) == {"drift": {"paths": []}, "drifted": [], "records": {}, "stats": {},
                             "http": {}}
    (tmp_path / "f").chmod(0o644)
    (tmp_path / "l").unlink()
    (tmp_path / "l").symlink_to("f")
    (tmp_path / "gone").write_text("")
    concern["paths"].append({"path": str(tmp_path / "d"), "owner": "nobody"})
    concern["paths"].append({"path": str(tmp_path / "nothing"), "state": "directory"})
    concern["paths"].append({"path": str(tmp_path / "f"), "state": "directory"})
    result = probe([concern])
    assert result["drifted"] == ["paths"]
    assert result["drift"]["paths"] == [
        f"{tmp_path}/f: mode 0644, want 0600",
        f"{tmp_path}/l: links to f, want d",
        f"{tmp_path}/gone: present, want absent",
        f"{tmp_path}/d: owner {ME}, want nobody",
        f"{tmp_path}/nothing: missing",
        f"{tmp_path}/f: not a directory",
    ]


def test_a_dangling_link_where_a_folder_belongs_drifts(tmp_path):
    (tmp_path / "d").symlink_to("nowhere")
    result = probe([{"name": "c", "paths": [{"path": str(tmp_path / "d"), "state": "directory"}]}])
    assert result["drift"]["c"] == [f"{tmp_path}/d: dangling link"]


def test_files_by_sha1_of_the_rendered_content(tmp_path):
    env = tmp_path / "cuda.env"
    env.write_text("CUDA_HOME=/opt/cuda\n")
    env.chmod(0o644)
    spec = {"path": str(env), "sha1": sha1("CUDA_HOME=/opt/cuda\n"), "mode": "0644"}
    assert probe([{"name": "env", "files": [spec]}])["drifted"] == []
    env.write_text("CUDA_HOME=/opt/cuda\n# edited by hand\n")
    assert probe([{"name": "env", "files": [spec]}])["drift"]["env"] == [
        f"{env}: content differs"
    ]
    env.unlink()
    assert probe([{"name": "env", "files": [spec]}])["drift"]["env"] == [f"{env}: missing"]


def test_records_compare_all_but_the_ignored_keys(tmp_path):
    record = tmp_path / "deployed" / "demo.json"
    body = {"role": "demo", "status": "deployed", "reason": "", "version": "1.2"}
    spec = {"path": str(record), "equal": body, "ignore": ["time"], "mode": "0644"}
    result = probe([{"name": "record", "records": [spec]}])
    assert result["drift"]["record"] == [f"{record}: missing"]
    assert result["records"] == {str(record): None}
    record.parent.mkdir()
    record.write_text(json.dumps({**body, "time": "2026-12-01T00:00:00Z"}))
    record.chmod(0o644)
    result = probe([{"name": "record", "records": [spec]}])
    assert result["drifted"] == []
    assert result["records"][str(record)]["time"] == "2026-12-01T00:00:00Z"
    result = probe([{"name": "record", "records": [{**spec, "equal": {**body, "version": "2"}}]}])
    assert result["drift"]["record"] == [f"{record}: record differs"]
    record.write_text("{not json")
    assert "not readable as JSON" in probe([{"name": "r", "records": [spec]}])["drift"]["r"][0]


DPKG = """Package: bash
Status: install ok installed
Architecture: amd64

Package: python3-dev
Status: deinstall ok config-files
Architecture: amd64

Package: libc6
Status: install ok installed
Architecture: i386
"""


def test_debs_from_dpkg_status(tmp_path):
    status = tmp_path / "status"
    status.write_text(DPKG)
    concern = {"name": "packages", "debs": ["bash", "libc6:i386", "python3-dev", "gcc"]}
    result = probe([concern], dpkg_status=str(status))
    assert result["drift"]["packages"] == ["Debian packages not installed: python3-dev, gcc"]
    assert probe([{"name": "p", "debs": ["bash"]}], dpkg_status=str(status))["drifted"] == []


def make_dist(site: Path, name: str, version: str) -> None:
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n")


def test_dists_by_exact_version_in_a_venv(tmp_path):
    venv = tmp_path / "venv"
    site = venv / "lib" / "python3.11" / "site-packages"
    (venv / "lib" / "python3.11").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")
    make_dist(site, "nvidia-ml-py", "13.615.71")
    make_dist(site, "Nvidia_Cuda_Nvcc", "13.0.88")
    spec = {"path": str(venv), "requirements": {"nvidia-ml-py": "13.615.71",
                                                "nvidia.cuda-nvcc": "13.0.88"}}
    assert probe([{"name": "venv", "dists": [spec]}])["drifted"] == []
    spec["requirements"] = {"nvidia-ml-py": "13.580.65", "pynvml": "1"}
    assert probe([{"name": "venv", "dists": [spec]}])["drift"]["venv"] == [
        f"{venv}: nvidia-ml-py 13.615.71 installed, want 13.580.65",
        f"{venv}: pynvml not installed, want 1",
    ]
    spec["path"] = str(tmp_path / "none")
    assert probe([{"name": "venv", "dists": [spec]}])["drift"]["venv"] == [
        f"{tmp_path}/none: missing"
    ]


def test_strays_other_than_the_kept_release(tmp_path):
    for name in ("13.0-abcdef12", "13.2-0123abcd", "current", "notes"):
        (tmp_path / name).mkdir()
    spec = {"path": str(tmp_path), "pattern": r"^[0-9]+\.[0-9]+-[0-9a-f]{8}$",
            "keep": ["13.0-abcdef12"]}
    assert probe([{"name": "switch", "strays": [spec]}])["drift"]["switch"] == [
        f"{tmp_path}: also holds 13.2-0123abcd"
    ]
    (tmp_path / "13.2-0123abcd").rmdir()
    assert probe([{"name": "switch", "strays": [spec]}])["drifted"] == []


def test_python_headers_of_this_interpreter_and_of_another(tmp_path):
    calls = []

    def runner(argv):
        calls.append(argv)
        return 0, str(tmp_path / "Python.h") + "\n"

    result = sp.probe([{"name": "h", "python_headers": ["/opt/other/python"]}], runner=runner)
    assert calls[0][0] == "/opt/other/python"
    assert result["drift"]["h"] == [f"{tmp_path}/Python.h is missing for /opt/other/python"]
    (tmp_path / "Python.h").write_text("")
    assert sp.probe([{"name": "h", "python_headers": ["/opt/other/python"]}],
                    runner=runner)["drifted"] == []
    failing = sp.probe([{"name": "h", "python_headers": ["/nope"]}], runner=lambda a: (127, ""))
    assert failing["drift"]["h"] == ["/nope: does not run"]
    # the probe's own interpreter is read in-process, no command
    sp.probe([{"name": "h", "python_headers": [sys.executable]}])


def cuda_tree(root: Path) -> Path:
    home = root / "nvidia" / "cu13"
    for name in ("cub", "thrust", "cuda", "nv"):
        (home / "include" / "cccl" / name).mkdir(parents=True)
    (home / "lib").mkdir()
    (home / "lib" / "libcudart.so.13").write_text("")
    return home


def ldconfig_without_driver(argv):
    assert argv[-1] == "-p"
    return 0, "1 libs found in cache `/etc/ld.so.cache'\n"


def test_cuda_links_reports_the_plan_of_the_links_module(tmp_path):
    home = cuda_tree(tmp_path)
    spec = {"name": "links", "cuda_links": {"cuda_home": str(home), "libcuda_stub": False}}
    result = sp.probe([spec], runner=ldconfig_without_driver)
    assert f"{home}/lib/libcudart.so: create -> libcudart.so.13" in result["drift"]["links"]
    assert f"{home}/include/cub: create -> cccl/cub" in result["drift"]["links"]
    assert f"{home}/lib64: create -> lib" in result["drift"]["links"]
    for name in ("cub", "thrust", "cuda", "nv"):
        (home / "include" / name).symlink_to(f"cccl/{name}")
    (home / "lib64").symlink_to("lib")
    (home / "lib" / "libcudart.so").symlink_to("libcudart.so.13")
    assert sp.probe([spec], runner=ldconfig_without_driver)["drifted"] == []
    # the libcudart link removed by hand: only that link drifts
    (home / "lib" / "libcudart.so").unlink()
    assert sp.probe([spec], runner=ldconfig_without_driver)["drift"]["links"] == [
        f"{home}/lib/libcudart.so: create -> libcudart.so.13"
    ]
    # with the stub: not built yet
    spec["cuda_links"]["libcuda_stub"] = True
    (home / "lib" / "libcudart.so").symlink_to("libcudart.so.13")
    assert sp.probe([spec], runner=ldconfig_without_driver)["drift"]["links"] == [
        f"{home}/lib/stubs/libcuda.so: create -> {cuda_links.STUB_NAME}"
    ]


def test_cuda_links_errors_are_drift_so_the_module_runs_and_fails_loudly(tmp_path):
    home = cuda_tree(tmp_path)
    (home / "include" / "cub").mkdir()
    (home / "include" / "cub" / "cub.cuh").write_text("#error\n")
    spec = {"name": "links", "cuda_links": {"cuda_home": str(home), "libcuda_stub": False}}
    reasons = sp.probe([spec], runner=ldconfig_without_driver)["drift"]["links"]
    assert any("a folder whose content differs" in r for r in reasons)
    missing = sp.probe([{"name": "l", "cuda_links": {"cuda_home": str(tmp_path / "x")}}],
                       runner=ldconfig_without_driver)
    assert missing["drift"]["l"] == [
        f"cuda_home {tmp_path}/x has no include/ folder: not a CUDA tree"
    ]


def test_follows_disabled_and_order(tmp_path):
    concerns = [
        {"name": "install", "paths": [{"path": str(tmp_path / "marker"), "state": "file"}]},
        {"name": "off", "enabled": False, "paths": [{"path": str(tmp_path / "x")}]},
        {"name": "links", "follows": ["install"]},
        {"name": "env", "paths": [{"path": str(tmp_path), "state": "directory"}]},
        {"name": "record", "follows": ["env"]},
    ]
    result = probe(concerns)
    assert result["drifted"] == ["install", "links"]
    assert "off" not in result["drift"]
    assert result["drift"]["links"] == ["follows install, which drifted"]
    (tmp_path / "marker").write_text("")
    assert probe(concerns)["drifted"] == []


def test_the_probe_changes_nothing(tmp_path):
    home = cuda_tree(tmp_path)
    (tmp_path / "f").write_text("x")
    before = snapshot(tmp_path)
    sp.probe(
        [{
            "name": "all",
            "paths": [{"path": str(tmp_path / "f"), "mode": "0600", "owner": "nobody"}],
            "files": [{"path": str(tmp_path / "f"), "sha1": "0" * 40}],
            "records": [{"path": str(tmp_path / "f"), "equal": {}}],
            "strays": [{"path": str(tmp_path), "pattern": "."}],
            "cuda_links": {"cuda_home": str(home)},
        }],
        runner=ldconfig_without_driver,
    )
    assert snapshot(tmp_path) == before


@pytest.mark.parametrize("mode", ["0644", 0o644])
def test_mode_as_string_or_number(tmp_path, mode):
    (tmp_path / "f").write_text("")
    (tmp_path / "f").chmod(0o644)
    assert sp.check_path({"path": str(tmp_path / "f"), "mode": mode}) == []


def test_stats_of_paths_besides_drift(tmp_path):
    (tmp_path / "python").write_text("")
    result = probe([], stats=[str(tmp_path / "python"), "/dev/null", str(tmp_path / "none")])
    assert result["stats"] == {
        str(tmp_path / "python"): {"exists": True, "isdir": False, "isreg": True, "ischr": False},
        "/dev/null": {"exists": True, "isdir": False, "isreg": False, "ischr": True},
        str(tmp_path / "none"): {"exists": False, "isdir": False, "isreg": False, "ischr": False},
    }


SHOW = """Id=sglang-router.service
LoadState=loaded
UnitFileState=enabled
ActiveState=active

Id=sglang@gpu0.service
LoadState=loaded
UnitFileState=disabled
ActiveState=failed

Id=sglang@gpu9.service
LoadState=not-found
UnitFileState=
ActiveState=inactive
"""


def test_services_from_one_systemctl_show():
    calls = []

    def runner(argv):
        calls.append(argv)
        return 0, SHOW

    specs = [{"name": n, "enabled": True, "active": True}
             for n in ("sglang-router.service", "sglang@gpu0.service", "sglang@gpu9.service")]
    result = sp.probe([{"name": "service", "services": specs}], runner=runner)
    assert calls == [["systemctl", "show", "--property=Id,LoadState,UnitFileState,ActiveState",
                      "--", "sglang-router.service", "sglang@gpu0.service",
                      "sglang@gpu9.service"]]
    assert result["drift"]["service"] == [
        "sglang@gpu0.service: disabled, want enabled",
        "sglang@gpu0.service: failed, want active",
        "sglang@gpu9.service: not-found, want loaded",
    ]
    assert sp.probe([{"name": "s", "services": specs[:1]}], runner=runner)["drifted"] == []
    assert sp.probe([{"name": "s", "services": specs[:1]}],
                    runner=lambda a: (1, ""))["drift"]["s"] == [
        "systemctl show failed for sglang-router.service"]


def test_users_and_groups_from_the_account_databases():
    me = pwd.getpwuid(os.getuid())
    import grp

    group = grp.getgrgid(me.pw_gid).gr_name
    ok = {"name": "c", "groups": [group],
          "users": [{"name": me.pw_name, "group": group, "home": me.pw_dir, "shell": me.pw_shell}]}
    assert probe([ok])["drifted"] == []
    bad = {"name": "c", "groups": ["no-such-group-x"],
           "users": [{"name": "no-such-user-x"},
                     {"name": me.pw_name, "home": "/elsewhere", "shell": "/usr/sbin/nologin"}]}
    assert probe([bad])["drift"]["c"] == [
        "group no-such-group-x: missing",
        "user no-such-user-x: missing",
        f"user {me.pw_name}: home {me.pw_dir}, want /elsewhere",
        f"user {me.pw_name}: shell {me.pw_shell}, want /usr/sbin/nologin",
    ]


def test_http_answers_of_the_hosts_own_services():
    """GETs on loopback: JSON parsed, an error status kept with its body, a closed port 0."""
    import http.server
    import socket
    import threading

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_GET(self):
            code, body = {"/workers": (200, b'{"workers": [{"url": "w", "is_healthy": true}]}'),
                          "/text": (200, b"ok"),
                          "/busy": (503, b'{"error": "no_available_workers"}')}[self.path]
            self.send_response(code)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_port}"
    # a port held, bound and not listening, for the whole request: refused, and no other
    # process can start listening on it in between
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        closed = held.getsockname()[1]
        try:
            urls = [f"{base}/workers", f"{base}/text", f"{base}/busy",
                    f"http://127.0.0.1:{closed}/"]
            result = sp.answer([], http=[{"url": u, "timeout": 5} for u in urls])
        finally:
            server.shutdown()
    http = result["http"]
    assert all(answer.pop("elapsed") >= 0 for answer in http.values())
    assert http[urls[0]] == {"status": 200, "msg": "",
                             "json": {"workers": [{"url": "w", "is_healthy": True}]}}
    assert http[urls[1]] == {"status": 200, "json": None, "msg": ""}
    assert http[urls[2]] == {"status": 503, "json": {"error": "no_available_workers"}, "msg": ""}
    assert http[urls[3]]["status"] == 0 and "refused" in http[urls[3]]["msg"].lower()
    assert result["changed"] is False and result["drifted"] == []


def test_http_post_of_a_json_body_with_headers_under_a_name():
    """A completion as the router's readiness sends it: POSTed JSON, the key in a header, the
    answer under its name (two requests to one URL), with the time it took."""
    import http.server
    import threading

    seen = []

    class Handler(http.server.BaseHTTPRequestHandler):
        def do_POST(self):
            body = self.rfile.read(int(self.headers["Content-Length"]))
            seen.append((self.path, self.headers["Authorization"],
                         self.headers["Content-Type"], json.loads(body)))
            answer = b'{"choices": [{"text": "x"}]}'
            self.send_response(200 if self.headers["Authorization"] == "Bearer k" else 401)
            self.send_header("Content-Length", str(len(answer)))
            self.end_headers()
            self.wfile.write(answer)

        def log_message(self, *args):
            pass

    server = http.server.HTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_port}/v1/completions"
    try:
        result = sp.answer([], http=[
            {"url": url, "name": "a", "body": {"model": "a", "max_tokens": 1},
             "headers": {"Authorization": "Bearer k"}},
            {"url": url, "name": "b", "body": {"model": "b", "max_tokens": 1}},
        ])
    finally:
        server.shutdown()
    assert seen == [
        ("/v1/completions", "Bearer k", "application/json", {"model": "a", "max_tokens": 1}),
        ("/v1/completions", None, "application/json", {"model": "b", "max_tokens": 1}),
    ]
    assert result["http"]["a"]["status"] == 200 and result["http"]["b"]["status"] == 401
    assert result["http"]["a"]["json"] == {"choices": [{"text": "x"}]}
    assert isinstance(result["http"]["a"]["elapsed"], float) and result["http"]["a"]["elapsed"] >= 0
