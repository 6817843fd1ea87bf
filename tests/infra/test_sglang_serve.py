"""What a host served by sglang_serve must offer, checked on the host itself.

Instances are read from the host (/etc/sglang/instances/<name>.args), so the checks need no
inventory values. Run after a deploy:
pytest tests/infra/test_sglang_serve.py --hosts=ansible://sglang_servers
--ansible-inventory=inventory/example
"""

from __future__ import annotations

import json
import urllib.parse

import pytest

pytestmark = pytest.mark.milestone("sglang_serve")

CONFIG_DIR = "/etc/sglang/instances"
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
        for suffix in ("args", "env"):
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
        code = host.run(f"curl -s -o /dev/null -w '%{{http_code}}' http://{probe}:{port}/health")
        assert code.stdout == "200", f"{name} /health {code.stdout}"


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
        for gpu in gpus.split(","):
            assert f"DeviceAllow=/dev/nvidia{gpu} rw" in dropin.content_string
        assert len(gpus.split(",")) % int(flag(argv, "--tp")) == 0


def test_api_key_only_on_loopback_or_with_a_key(host):
    for name, argv in instances(host).items():
        address = flag(argv, "--host")
        if address not in ("127.0.0.1", "::1", "localhost"):
            assert "--api-key" in argv, f"{name} listens on {address} without --api-key"


@pytest.mark.parametrize("path", ["/v1/models"])
def test_served_name_listed(host, path):
    for name, argv in instances(host).items():
        address = flag(argv, "--host")
        probe = "127.0.0.1" if address == "0.0.0.0" else address
        url = urllib.parse.urljoin(f"http://{probe}:{flag(argv, '--port')}", path)
        # the key goes from its file into a header on the host: never on a command line here
        header = (
            "awk 'p {print \"Authorization: Bearer \" $0; exit} /^--api-key$/ {p = 1}' "
            f"{CONFIG_DIR}/{name}.args"
        )
        with host.sudo():
            done = host.run(f"{header} | curl -s -H @- {url}")
        ids = [m["id"] for m in json.loads(done.stdout or "{}").get("data", [])]
        assert flag(argv, "--served-model-name") in ids, f"{name}: {ids}"
