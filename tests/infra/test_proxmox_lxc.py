"""What a container provisioned by proxmox_lxc must offer, checked on the container itself.

Run after a deploy: pytest tests/infra/test_proxmox_lxc.py --hosts=ansible://all
--ansible-inventory=inventory/example
"""


def test_systemd_is_running(host):
    # --wait: just after a start systemd says "starting" until its boot jobs are done
    state = host.run("timeout 300 systemctl is-system-running --wait").stdout.strip()
    assert state in ("running", "degraded"), state
    assert host.process.get(pid=1).comm == "systemd"


def test_python3_for_ansible(host):
    assert host.exists("python3")
    check = host.run("python3 -c 'import sys; print(sys.version_info >= (3, 9))'")
    assert check.stdout.strip() == "True"


def test_sshd_enabled_and_listening(host):
    ssh = host.service("ssh")
    assert ssh.is_running
    assert ssh.is_enabled
    assert host.socket("tcp://0.0.0.0:22").is_listening or host.socket("tcp://:::22").is_listening


def test_model_store_is_a_mount(host):
    store = host.mount_point("/srv/models")
    assert store.exists
    assert host.file("/srv/models").is_directory


def test_hostname_matches_inventory(host):
    expected = host.backend.get_hostname()
    assert host.run("hostname").stdout.strip() == expected
