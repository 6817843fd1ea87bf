"""What a host served by sglang_serve must offer, checked on the host itself.

Instances are read from the host (/etc/sglang/instances/<name>.args, the API key from
<name>.yaml), so the checks need no
inventory values. Run after a deploy:
pytest tests/infra/test_sglang_serve.py --hosts=ansible://sglang_servers
--ansible-inventory=inventory/example
"""

from __future__ import annotations

import importlib.util
import json
import shlex
import urllib.parse
from pathlib import Path

import pytest

pytestmark = pytest.mark.milestone("sglang_serve")

CONFIG_DIR = "/etc/sglang/instances"


def _cmdline_scan() -> str:
    """The scan in cmdline_scan.py beside this file (the lab suites run it too)."""
    path = Path(__file__).with_name("cmdline_scan.py")
    spec = importlib.util.spec_from_file_location("sglang_lxc_cmdline_scan", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module.CMDLINE_SCAN


CMDLINE_SCAN = _cmdline_scan()
UNIT = "/etc/systemd/system/sglang@.service"
HARDENING = (
    "NoNewPrivileges=yes",
    "ProtectSystem=strict",
    "PrivateTmp=yes",
    "DevicePolicy=closed",
    "Restart=on-failure",
    "LimitNOFILE=",
    "TimeoutStartSec=",
)


def instances(host) -> dict[str, list[str]]:
    """name -> argv, from the per-instance argument files."""
    with host.sudo():
        names = host.run(f"ls {CONFIG_DIR}").stdout.split()
        return {
            n[: -len(".args")]: host.file(f"{CONFIG_DIR}/{n}").content_string.splitlines()
            for n in names
            if n.endswith(".args")
        }


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]




def bearer_header(name: str) -> str:
    """A shell command printing the instance's Authorization header from its --config file."""
    script = (
        "import json, sys\n"
        "for line in open(sys.argv[1], encoding='utf-8'):\n"
        "    if line.startswith('api-key:'):\n"
        "        print('Authorization: Bearer ' + json.loads(line.split(':', 1)[1]))\n"
    )
    return f"python3 -c {shlex.quote(script)} {CONFIG_DIR}/{name}.yaml"


def test_service_account_cannot_log_in(host):
    user = host.user("sglang")
    assert user.exists
    assert user.shell in ("/usr/sbin/nologin", "/bin/false")


def test_template_unit_is_hardened_and_verifies(host):
    unit = host.file(UNIT)
    assert unit.exists
    for line in HARDENING:
        assert line in unit.content_string, line
    with host.sudo():
        done = host.run(f"systemd-analyze verify {UNIT}:sglang@infra-check.service")
    assert done.rc == 0, done.stderr


def test_at_least_one_instance(host):
    assert instances(host)


def test_instance_files_are_private(host):
    for name in instances(host):
        for suffix in ("args", "env", "yaml"):
            f = host.file(f"{CONFIG_DIR}/{name}.{suffix}")
            assert f.user == "root"
            assert f.group == "sglang"
            assert f.mode == 0o640, f"{f.path} mode {oct(f.mode)}"


def test_instances_enabled_running_and_listening(host):
    for name, argv in instances(host).items():
        service = host.service(f"sglang@{name}")
        assert service.is_enabled, name
        assert service.is_running, name
        address = flag(argv, "--host")
        port = flag(argv, "--port")
        probe = "127.0.0.1" if address == "0.0.0.0" else address
        assert host.socket(f"tcp://{address}:{port}").is_listening, f"{name} on {address}:{port}"
        # SGLang's /health generates a token: on busy cores one may time out or answer 503
        # while another request runs, so ask until it answers 200 (60 tries, 2 s apart)
        code = host.run(
            "for i in $(seq 60); do "
            f"c=$(curl -s -o /dev/null -m 30 -w '%{{http_code}}' http://{probe}:{port}/health); "
            '[ "$c" = 200 ] && break; sleep 2; done; echo "$c"')
        assert code.stdout.strip() == "200", f"{name} /health {code.stdout}"


def test_instances_own_their_gpus(host):
    for name, argv in instances(host).items():
        with host.sudo():
            env = host.file(f"{CONFIG_DIR}/{name}.env").content_string
        gpus = next(
            line.split("=", 1)[1].strip('"')
            for line in env.splitlines()
            if line.startswith("CUDA_VISIBLE_DEVICES=")
        )
        dropin = host.file(f"/etc/systemd/system/sglang@{name}.service.d/devices.conf")
        if not gpus:  # a CPU instance (--device cpu): it may open no GPU at all
            assert flag(argv, "--device") == "cpu", f"{name}: no GPUs but not --device cpu"
            assert "/dev/nvidia" not in dropin.content_string
            continue
        for gpu in gpus.split(","):
            assert f"DeviceAllow=/dev/nvidia{gpu} rw" in dropin.content_string
        assert len(gpus.split(",")) % int(flag(argv, "--tp")) == 0


def test_api_key_only_on_loopback_or_with_a_key(host):
    for name, argv in instances(host).items():
        address = flag(argv, "--host")
        if address not in ("127.0.0.1", "::1", "localhost"):
            with host.sudo():
                header = host.run(bearer_header(name)).stdout
            assert header.strip(), f"{name} listens on {address} without an API key"


def test_no_command_line_holds_the_api_key(host):
    """The key is in each instance's --config file only: no /proc/<pid>/cmdline shows it."""
    with host.sudo():
        done = host.run(f"python3 -c {shlex.quote(CMDLINE_SCAN)}")
    assert done.rc == 0, done.stderr
    scan = json.loads(done.stdout)
    assert scan["processes"] > 0
    assert scan["holding"] == [], f"processes whose command line holds the API key: {scan}"


@pytest.mark.parametrize("path", ["/v1/models"])
def test_served_name_listed(host, path):
    for name, argv in instances(host).items():
        address = flag(argv, "--host")
        probe = "127.0.0.1" if address == "0.0.0.0" else address
        url = urllib.parse.urljoin(f"http://{probe}:{flag(argv, '--port')}", path)
        # the key goes from its file into a header on the host: never on a command line here
        with host.sudo():
            done = host.run(f"{bearer_header(name)} | curl -s -H @- {url}")
        ids = [m["id"] for m in json.loads(done.stdout or "{}").get("data", [])]
        assert flag(argv, "--served-model-name") in ids, f"{name}: {ids}"
