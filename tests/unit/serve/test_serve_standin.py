"""The stand-in server: flags it accepts and the startup it plays."""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request

from serve_helpers import ROOT, standin

STANDIN = ROOT / "tests/standins/sglang_server.py"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def test_parse_accepts_unit_flags_and_ignores_unknown():
    args = standin.parse(
        [
            "--model-path",
            "/srv/models/M",
            "--host",
            "127.0.0.1",
            "--port",
            "1",
            "--tp",
            "2",
            "--api-key",
            "k",
            "--model-loader-extra-config",
            '{"a": 1}',
            "--enable-metrics",
            "--whatever",
            "x",
        ]
    )
    assert args.served_model_name == "M"
    assert args.tp == 2
    assert "--whatever" in args.unknown


def get(url, key=None):
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {key}"} if key else {})
    try:
        with urllib.request.urlopen(request, timeout=2) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as err:
        return err.code, b""
    except OSError:
        return None, b""


def test_startup_sequence():
    port = free_port()
    env = {**os.environ, "SGLANG_STANDIN_LOAD_SECONDS": "1", "SGLANG_STANDIN_WARMUP_SECONDS": "1"}
    proc = subprocess.Popen(
        [
            sys.executable,
            str(STANDIN),
            "--port",
            str(port),
            "--served-model-name",
            "m",
            "--api-key",
            "secret",
        ],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert get(f"http://127.0.0.1:{port}/health")[0] is None  # loading: port closed
        seen = set()
        deadline = time.time() + 10
        while time.time() < deadline:
            status, _ = get(f"http://127.0.0.1:{port}/health")
            seen.add(status)
            if status == 200:
                break
            time.sleep(0.1)
        assert {None, 503, 200} <= seen
        assert get(f"http://127.0.0.1:{port}/v1/models")[0] == 401
        status, body = get(f"http://127.0.0.1:{port}/v1/models", "secret")
        assert status == 200
        assert [m["id"] for m in json.loads(body)["data"]] == ["m"]
    finally:
        proc.terminate()
        out, _ = proc.communicate(timeout=5)
    assert "Loading safetensors checkpoint shards" in out
    assert "The server is fired up and ready to roll!" in out
    assert "secret" not in out


def test_crash_mode_exits_non_zero():
    env = {**os.environ, "SGLANG_STANDIN_MODE": "crash", "SGLANG_STANDIN_LOAD_SECONDS": "0.4"}
    done = subprocess.run(
        [sys.executable, str(STANDIN), "--port", str(free_port())],
        capture_output=True,
        text=True,
        env=env,
        timeout=10,
    )
    assert done.returncode == 1
    assert "CUDA out of memory" in done.stdout


def test_config_file_options_come_before_the_command_line(tmp_path):
    """The stand-in takes --config as SGLang's ConfigArgumentMerger does: the file's options first
    (the command line wins), and the path never becomes an option itself."""
    config = tmp_path / "gpu0.yaml"
    config.write_text('# managed\napi-key: "sk-a\\"b"\nport: 31000\n')
    args = standin.parse(["--model-path", "m", "--config", str(config), "--port", "30001"])
    assert args.api_key == 'sk-a"b'
    assert args.port == 30001
    assert args.unknown == []
