"""Unit tests of the pct stand-in (tests/standins/pct): config format, options, LXC config."""

from __future__ import annotations

import importlib.machinery
import importlib.util
import io
import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
PCT = ROOT / "tests/standins/pct"


def load_pct():
    loader = importlib.machinery.SourceFileLoader("pct_standin", str(PCT))
    spec = importlib.util.spec_from_loader("pct_standin", loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


pct = load_pct()


def test_config_round_trip_keeps_raw_lxc_lines_and_description():
    text = ("#GPU box\narch: amd64\ncores: 8\nhostname: ct200\n"
            "lxc.cgroup2.devices.allow: c 195:* rwm\n"
            "lxc.mount.entry: /dev/nvidia0 dev/nvidia0 none bind,optional,create=file\n")
    opts, raw = pct.parse_conf(text)
    assert opts["description"] == "GPU box"
    assert raw[0] == ("lxc.cgroup2.devices.allow", "c 195:* rwm")
    assert pct.parse_conf(pct.format_conf(opts, raw)) == (opts, raw)


@pytest.mark.parametrize("value", ["99", "abc", "1000000000", "-5"])
def test_vmid_out_of_range(value):
    with pytest.raises(pct.PctError, match="vmid: value must be an integer in 100"):
        pct.check_vmid(value)


def test_rootfs_allocation_and_nic_defaults():
    assert pct.normalise_option("rootfs", "local-lvm:32", 200) == "local-lvm:200/rootfs,size=32G"
    net = pct.normalise_option("net0", "name=eth0,bridge=lxcbr0,ip=dhcp", 200)
    assert net.startswith("name=eth0,bridge=lxcbr0,ip=dhcp,hwaddr=BC:24:11:")
    assert net.endswith(",type=veth")
    assert net == pct.normalise_option("net0", "name=eth0,bridge=lxcbr0,ip=dhcp", 200)


@pytest.mark.parametrize(
    ("key", "value", "message"),
    [
        ("memory", "8", "minimum value of 16"),
        ("cores", "two", "type check ('integer') failed"),
        ("mp0", "local-lvm:8,mp=/srv/models", "bind mounts of host paths only"),
        ("mp0", "/tank/models", "missing property - 'mp'"),
        ("net0", "bridge=vmbr0", "missing property - 'name'"),
    ],
)
def test_bad_options_are_refused(key, value, message):
    with pytest.raises(pct.PctError, match=re.escape(message)):
        pct.normalise_option(key, value, 200)


def test_unknown_option_is_refused_like_pct():
    with pytest.raises(pct.PctError, match="property is not defined in schema"):
        pct.parse_options(["--gpu", "all"])


def test_lxc_config_from_proxmox_config(monkeypatch):
    opts = {"hostname": "ct200", "memory": "4096", "cores": "64",
            "net0": "name=eth0,bridge=lxcbr0,ip=10.0.3.200/24,gw=10.0.3.1,hwaddr=BC:24:11:AA:BB:CC",
            "mp0": "/srv/lab/models,mp=/srv/models,ro=1"}
    raw = [("lxc.cgroup2.devices.allow", "c 195:* rwm")]
    monkeypatch.setattr(pct, "cgroup_version", lambda: 1)
    v1 = pct.lxc_config(200, opts, raw)
    assert "lxc.cgroup.memory.limit_in_bytes = 4294967296" in v1
    assert "lxc.cgroup.devices.allow = c 195:* rwm" in v1
    assert f"lxc.cgroup.cpuset.cpus = 0-{min(64, os.cpu_count()) - 1}" in v1
    assert "lxc.net.0.ipv4.address = 10.0.3.200/24" in v1
    assert "lxc.net.0.ipv4.gateway = 10.0.3.1" in v1
    assert "lxc.mount.entry = /srv/lab/models srv/models none bind,create=dir,ro 0 0" in v1
    monkeypatch.setattr(pct, "cgroup_version", lambda: 2)
    v2 = pct.lxc_config(200, opts, raw)
    assert "lxc.cgroup2.memory.max = 4294967296" in v2
    assert "lxc.cgroup2.devices.allow = c 195:* rwm" in v2


def run(tmp_path, *args):
    env = {**os.environ, "PCT_STANDIN_ROOT": str(tmp_path / "root"),
           "PCT_STANDIN_LXC_PATH": str(tmp_path / "lxc")}
    return subprocess.run([sys.executable, str(PCT), *args], capture_output=True, text=True,
                          env=env)


def make_template(tmp_path) -> str:
    tdir = tmp_path / "root/var/lib/vz/template/cache"
    tdir.mkdir(parents=True)
    with tarfile.open(tdir / "tiny.tar", "w") as tar:
        data = b"tiny\n"
        info = tarfile.TarInfo("./etc/hostname")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return "local:vztmpl/tiny.tar"


def test_cli_create_set_config_destroy(tmp_path):
    template = make_template(tmp_path)
    (tmp_path / "lxc").mkdir()
    proc = run(tmp_path, "create", "300", template, "--hostname", "ct300", "--memory", "1024",
               "--net0", "name=eth0,bridge=lxcbr0,ip=10.0.3.30/24", "--rootfs", "local:4",
               "--unprivileged", "0")
    assert proc.returncode == 0, proc.stderr
    assert (tmp_path / "lxc/300/rootfs/etc/hostname").read_text() == "tiny\n"
    config = run(tmp_path, "config", "300").stdout
    assert "memory: 1024" in config and "rootfs: local:300/rootfs,size=4G" in config
    assert run(tmp_path, "set", "300", "--cores", "4", "--delete", "swap").returncode == 0
    config = run(tmp_path, "config", "300").stdout
    assert "cores: 4" in config and "swap:" not in config
    assert run(tmp_path, "status", "300").stdout.strip() == "status: stopped"
    assert "ct300" in run(tmp_path, "list").stdout
    again = run(tmp_path, "create", "300", template)
    assert again.returncode == 255 and "CT 300 already exists" in again.stderr
    assert run(tmp_path, "destroy", "300").returncode == 0
    gone = run(tmp_path, "config", "300")
    assert gone.returncode == 255 and "does not exist" in gone.stderr


def test_cli_refuses_what_the_lab_cannot_do(tmp_path):
    template = make_template(tmp_path)
    proc = run(tmp_path, "create", "301", template, "--unprivileged", "1")
    assert proc.returncode == 255 and "privileged containers only" in proc.stderr
    proc = run(tmp_path, "create", "301", "local:vztmpl/missing.tar.zst")
    assert proc.returncode == 255 and "does not exist" in proc.stderr


@pytest.mark.skipif(os.geteuid() != 0 or not shutil.which("lxc-copy"),
                    reason="LXC's snapshot copy (lxc-copy) needs root and the lxc package")
def test_template_and_clones_like_thin_storage(tmp_path):
    template = make_template(tmp_path)
    (tmp_path / "lxc").mkdir()
    proc = run(tmp_path, "create", "310", template, "--hostname", "golden", "--memory", "1024",
               "--net0", "name=eth0,bridge=lxcbr0,ip=10.0.3.10/24", "--rootfs", "local:4",
               "--mp0", "/srv/lab/models,mp=/srv/models")
    assert proc.returncode == 0, proc.stderr
    linked = run(tmp_path, "clone", "310", "311", "--full", "0")
    assert linked.returncode == 255 and "only possible from a template" in linked.stderr
    assert run(tmp_path, "template", "310").returncode == 0
    config = run(tmp_path, "config", "310").stdout
    assert "template: 1" in config and "rootfs: local:base-310-disk-0,size=4G" in config
    started = run(tmp_path, "start", "310")
    assert started.returncode == 255 and "template" in started.stderr

    # linked (the template's default): an overlay over the template's rootfs, nothing copied
    assert run(tmp_path, "clone", "310", "311", "--hostname", "ct311").returncode == 0, \
        run(tmp_path, "config", "311").stderr
    config = run(tmp_path, "config", "311").stdout
    assert "template" not in config and "hostname: ct311" in config
    assert "rootfs: local:base-310-disk-0/vm-311-disk-0,size=4G" in config
    assert "mp0: /srv/lab/models,mp=/srv/models" in config  # bind mounts come with the clone
    old_mac = re.search(r"hwaddr=([\w:]+)", run(tmp_path, "config", "310").stdout)[1]
    assert f"hwaddr={old_mac}" not in config  # its own MAC address
    lxc_conf = (tmp_path / "lxc/311/config").read_text()
    assert (f"lxc.rootfs.path = overlay:{tmp_path}/lxc/310/rootfs:"
            f"{tmp_path}/lxc/311/overlay/delta") in lxc_conf
    assert not (tmp_path / "lxc/311/rootfs/etc/hostname").exists()  # no copy was made

    # full: a copy of the rootfs, on its own volume
    assert run(tmp_path, "clone", "310", "312", "--full", "1").returncode == 0
    assert "rootfs: local:312/rootfs,size=4G" in run(tmp_path, "config", "312").stdout
    assert (tmp_path / "lxc/312/rootfs/etc/hostname").read_text() == "tiny\n"
    assert "dir:" in (tmp_path / "lxc/312/config").read_text()

    taken = run(tmp_path, "clone", "310", "311")
    assert taken.returncode == 255 and "CT 311 already exists" in taken.stderr
    busy = run(tmp_path, "destroy", "310")
    assert busy.returncode == 255 and "still in use by linked clones" in busy.stderr
    assert run(tmp_path, "destroy", "311").returncode == 0
    assert run(tmp_path, "destroy", "312").returncode == 0
    assert run(tmp_path, "destroy", "310").returncode == 0
    assert sorted(p.name for p in (tmp_path / "lxc").iterdir()) == []


def test_guest_setup_of_a_linked_clone_goes_to_its_own_layer(tmp_path, monkeypatch):
    monkeypatch.setattr(pct, "LXC_PATH", tmp_path)
    (tmp_path / "310/rootfs/etc").mkdir(parents=True)
    (tmp_path / "310/rootfs/etc/hosts").write_text("127.0.0.1 localhost\n::1 localhost\n")
    (tmp_path / "311/overlay/delta").mkdir(parents=True)
    opts = {"hostname": "ct311", "rootfs": "local:base-310-disk-0/vm-311-disk-0,size=4G",
            "net0": "name=eth0,bridge=lxcbr0,ip=dhcp"}
    pct.setup_guest(311, opts)
    delta = tmp_path / "311/overlay/delta/etc"
    assert (delta / "hostname").read_text() == "ct311\n"
    assert (delta / "hosts").read_text() == (
        "127.0.0.1 localhost\n::1 localhost\n127.0.1.1 ct311 # pct-standin\n")
    assert (tmp_path / "310/rootfs/etc/hosts").read_text() == "127.0.0.1 localhost\n::1 localhost\n"


def test_guest_without_hosts_file_gets_the_loopback_names(tmp_path, monkeypatch):
    """debootstrap writes no /etc/hosts; pve-container adds the loopback names, or a reverse
    lookup of 127.0.0.1 goes to DNS (torch's c10d store waited 10 s on it at each SGLang start)."""
    monkeypatch.setattr(pct, "LXC_PATH", tmp_path)
    (tmp_path / "320/rootfs").mkdir(parents=True)
    opts = {"hostname": "ct320", "rootfs": "local:320/vm-320-disk-0.raw,size=4G"}
    pct.setup_guest(320, opts)
    pct.setup_guest(320, {**opts, "hostname": "ct321"})  # a rename keeps one of each
    lines = (tmp_path / "320/rootfs/etc/hosts").read_text().splitlines()
    assert [line.split()[0] for line in lines] == ["127.0.0.1", "::1", "127.0.1.1"]
    assert "localhost" in lines[0].split() and "localhost" in lines[1].split()
    assert lines[2].split()[1] == "ct321"
