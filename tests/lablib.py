"""Helpers for tests that run playbooks against real LXC containers of the local lab."""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
PCT = REPO / "tests" / "standins" / "pct"
LAB_INVENTORY = REPO / "inventory" / "lab"
VENV_BIN = Path(sys.executable).parent
_RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+"
    r"unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)\s+skipped=(?P<skipped>\d+)",
    re.M,
)


def lab_root() -> Path:
    return Path(os.environ.get("PCT_STANDIN_ROOT", "/var/lib/sglang-lxc-lab"))


def lab_env(**extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        ANSIBLE_CONFIG=str(REPO / "ansible.cfg"),
        ANSIBLE_NOCOLOR="1",
        ANSIBLE_FORCE_COLOR="0",
        PATH=os.pathsep.join([str(VENV_BIN), env.get("PATH", "")]),
        PYTHONUNBUFFERED="1",
    )
    # the todo callback's run folders go to /tmp, not into the checkout's artifacts/
    env.setdefault("SGLANG_LXC_ARTIFACTS",
                   str(Path(tempfile.gettempdir()) / "sglang-lxc-test-artifacts"))
    env.update(extra)
    return env


def missing_for_lab() -> str | None:
    """Why lab tests cannot run here, or None."""
    if os.geteuid() != 0:
        return "lab tests need root"
    for cmd in ("lxc-start", "debootstrap", "zstd"):
        if shutil.which(cmd) is None:
            return f"lab tests need {cmd} (apt-get install lxc debootstrap zstd)"
    return None


@dataclass
class PlaybookResult:
    rc: int
    output: str
    stats: dict[str, dict[str, int]] = field(default_factory=dict)

    @property
    def changed(self) -> int:
        return sum(s["changed"] for s in self.stats.values())

    @property
    def failed(self) -> int:
        return sum(s["failed"] + s["unreachable"] for s in self.stats.values())

    def __str__(self) -> str:  # shown by pytest when an assertion on the result fails
        return f"rc={self.rc} stats={self.stats}\n{self.output[-6000:]}"


def ansible_playbook(
    playbook: str | Path | list,
    inventory: str | Path,
    extra_vars: dict | None = None,
    check: bool = False,
    args: list[str] | None = None,
    env: dict[str, str] | None = None,
    timeout: int = 1800,
) -> PlaybookResult:
    books = playbook if isinstance(playbook, list) else [playbook]
    cmd = [str(VENV_BIN / "ansible-playbook"), "-i", str(inventory),
           *[str(REPO / b) for b in books]]
    if extra_vars:
        cmd += ["-e", json.dumps(extra_vars)]
    if check:
        cmd += ["--check"]
    cmd += args or []
    started = time.monotonic()
    proc = subprocess.run(
        cmd,
        cwd=REPO,
        env=lab_env(**(env or {})),
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        timeout=timeout,
    )
    log_run(books, time.monotonic() - started)
    stats = {
        m["host"]: {k: int(v) for k, v in m.groupdict().items() if k != "host"}
        for m in _RECAP.finditer(proc.stdout)
    }
    return PlaybookResult(proc.returncode, proc.stdout, stats)


def log_run(books: list, seconds: float) -> None:
    """With SGLANG_LXC_PLAYBOOK_LOG set, one JSON line per ansible-playbook run: the test that
    ran it, the playbooks and the wall time (benchmarks/playbook_runs.py counts them per file)."""
    path = os.environ.get("SGLANG_LXC_PLAYBOOK_LOG")
    if not path:
        return
    line = {"test": os.environ.get("PYTEST_CURRENT_TEST", "").split(" ")[0],
            "playbooks": [str(b) for b in books], "seconds": round(seconds, 1)}
    with open(path, "a", encoding="utf-8") as handle:  # one short write: appends never mix
        handle.write(json.dumps(line) + "\n")


def pct(*args: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(PCT), *args], capture_output=True, text=True, check=check, env=lab_env()
    )


@dataclass
class LabContainer:
    """A real LXC container made through the proxmox_lxc role, reachable over SSH."""

    vmid: int
    workdir: Path
    spec: dict

    @property
    def name(self) -> str:
        return f"ct{self.vmid}"

    @property
    def ip(self) -> str:
        return self.spec["ip"].split("/")[0]

    @property
    def inventory(self) -> Path:
        return self.workdir / "inventory" / "hosts.yml"

    @property
    def node_vars(self) -> Path:
        return self.workdir / "node-vars.json"

    def provision(self, extra_vars: dict | None = None, check: bool = False) -> PlaybookResult:
        """Run the proxmox_lxc role for this container on the lab node."""
        return ansible_playbook(
            "playbooks/containers.yml",
            LAB_INVENTORY,
            extra_vars={"proxmox_lxc_containers": [self.spec], **(extra_vars or {})},
            check=check,
        )

    def run_playbook(
        self,
        playbook: str | Path,
        extra_vars: dict | None = None,
        check: bool = False,
        args: list[str] | None = None,
    ) -> PlaybookResult:
        """Run a playbook against this container (inventory group sglang_servers)."""
        return ansible_playbook(
            playbook, self.inventory, extra_vars=extra_vars, check=check,
            args=["--limit", self.name, *(args or [])],
        )

    def exec(self, *command: str, check: bool = True) -> subprocess.CompletedProcess:
        """Run a command in the container through pct exec (no SSH)."""
        return pct("exec", str(self.vmid), "--", *command, check=check)

    def testinfra(self, *test_files: str, extra: list[str] | None = None):
        """Run testinfra checks from tests/infra against this container; returns the process."""
        return subprocess.run(
            [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-q",
             *[str(REPO / f) for f in test_files],
             f"--hosts=ansible://{self.name}", f"--ansible-inventory={self.inventory}",
             "--rootdir", str(REPO / "tests" / "infra"), *(extra or [])],
            cwd=REPO, env=lab_env(), capture_output=True, text=True, timeout=900,
        )

    def destroy(self) -> None:
        # a test container's state is thrown away with it: stopped at once (lxc-stop -k), not shut
        # down (its units' stop timeouts took 10-20 s per container, on every worker's path)
        pct("destroy", str(self.vmid), "--force", "1", check=False)
        # an LXC container left without its Proxmox config by an interrupted run
        lxc_path = os.environ.get("PCT_STANDIN_LXC_PATH", "/var/lib/lxc")
        if (Path(lxc_path) / str(self.vmid)).exists():
            subprocess.run(["lxc-destroy", "-f", "-P", lxc_path, "-n", str(self.vmid)],
                           capture_output=True, check=False)
        shutil.rmtree(lab_root() / "data" / self.name, ignore_errors=True)


def node_cache_mounts(wheels: str | Path | None = None, uv_cache: str | Path | None = None
                      ) -> list[dict]:
    """The node cache's mounts, as inventory/lab gives them to the lab's containers: the node's
    wheel folder read-only (default: the controller wheelhouse, the lab's node is this machine)
    and uv's cache read-write (default: the lab's node-cache/uv)."""
    wheels = wheels or Path.home() / ".cache" / "sglang-lxc" / "wheelhouse"
    uv_cache = uv_cache or lab_root() / "node-cache" / "uv"
    return [
        {"host_path": str(wheels), "path": "/var/cache/sglang-lxc/node/wheelhouse",
         "read_only": True},
        {"host_path": str(uv_cache), "path": "/var/cache/sglang-lxc/node/uv"},
    ]


def write_inventory(ct: LabContainer) -> None:
    """An inventory with the lab's group_vars and this one container in sglang_servers."""
    inv = ct.workdir / "inventory"
    inv.mkdir(parents=True, exist_ok=True)
    group_vars = inv / "group_vars"
    if not group_vars.exists():
        group_vars.symlink_to(LAB_INVENTORY / "group_vars")
    (inv / "hosts.yml").write_text(
        "all:\n  children:\n    sglang_servers:\n      hosts:\n"
        f"        {ct.name}:\n          ansible_host: {ct.ip}\n"
    )


# ----------------------------------------------------------------- converge once, clone many


def lab_address(vmid: int) -> str:
    """10.0.3.<vmid>, or 10.0.3.<vmid - 100> above 254 (docs/CONVENTIONS.md)."""
    return f"10.0.3.{vmid if vmid < 255 else vmid - 100}"


@dataclass
class GoldenTemplate:
    """A container converged through the real roles once per test session and made a Proxmox
    template (playbooks/template.yml), for scenario containers cloned from it (``clone_from``).

    pytest-xdist workers share it: ``ensure()`` works under a file lock, and a marker names the
    template with the key it was made for (its spec and playbooks); a template found without a
    matching marker (a killed run, another checkout) is destroyed, after its clones, and made
    again. ``release()`` counts the workers out; the last one destroys the template.
    """

    vmid: int
    playbooks: tuple[str, ...] = ("playbooks/toolchain.yml", "playbooks/sglang.yml")
    extra_vars: dict = field(default_factory=dict)
    spec: dict = field(default_factory=dict)

    @property
    def lock(self) -> Path:
        return Path(f"/run/sglang-lxc-golden-{self.vmid}.lock")

    @property
    def marker(self) -> Path:
        return Path(f"/run/sglang-lxc-golden-{self.vmid}.json")

    def key(self) -> str:
        return hashlib.sha256(json.dumps([self.playbooks, self.extra_vars, self.spec],
                                         sort_keys=True).encode()).hexdigest()[:16]

    def _state(self) -> dict:
        try:
            return json.loads(self.marker.read_text())
        except (OSError, ValueError):
            return {}

    def _is_template(self) -> bool:
        conf = lab_root() / "etc/pve/lxc" / f"{self.vmid}.conf"
        return conf.exists() and "template: 1" in conf.read_text().splitlines()

    def _destroy(self) -> None:
        """The template and every linked clone of it (clones first)."""
        for conf in (lab_root() / "etc/pve/lxc").glob("*.conf"):
            try:
                text = conf.read_text()
            except FileNotFoundError:  # another worker destroyed that container meanwhile
                continue
            if f":base-{self.vmid}-disk-0/" in text:
                vmid = int(conf.stem)
                LabContainer(vmid, Path(tempfile.gettempdir()), {"ip": "dhcp"}).destroy()
        LabContainer(self.vmid, Path(tempfile.gettempdir()), {"ip": "dhcp"}).destroy()

    def ensure(self, workdir: Path) -> int:
        """The template's vmid, made first when no worker has made it for this key."""
        with open(self.lock, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self._state()
            users = [p for p in state.get("users", []) if Path(f"/proc/{p}").exists()]
            if state.get("key") != self.key() or not self._is_template():
                self._destroy()
                self._make(workdir)
                users = []
            state = {"key": self.key(), "users": [*users, os.getpid()]}
            self.marker.write_text(json.dumps(state))
        return self.vmid

    def _make(self, workdir: Path) -> None:
        name = f"ct{self.vmid}"
        spec = {"name": name, "vmid": self.vmid, "ip": f"{lab_address(self.vmid)}/24",
                "gateway": "10.0.3.1", "mounts": node_cache_mounts(), **self.spec}
        ct = LabContainer(self.vmid, workdir, spec)
        write_inventory(ct)
        made = ct.provision()
        if made.rc != 0:
            raise RuntimeError(f"golden {name}: could not make the container:\n{made}")
        if self.playbooks:
            run = ansible_playbook(list(self.playbooks), ct.inventory, extra_vars=self.extra_vars,
                                   args=["--limit", name])
            if run.rc != 0:
                raise RuntimeError(f"golden {name}: converging it failed:\n{run}")
        made = ansible_playbook("playbooks/template.yml", LAB_INVENTORY,
                                extra_vars={"proxmox_lxc_template_vmid": self.vmid})
        if made.rc != 0:
            raise RuntimeError(f"golden {name}: making it a template failed:\n{made}")

    def release(self) -> None:
        """This worker is done with it; the last one out destroys it (after its clones)."""
        with open(self.lock, "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            state = self._state()
            users = [p for p in state.get("users", [])
                     if p != os.getpid() and Path(f"/proc/{p}").exists()]
            if users:
                self.marker.write_text(json.dumps({**state, "users": users}))
                return
            self._destroy()
            self.marker.unlink(missing_ok=True)


FIT_RECORDING = REPO / "tests/unit/gpu/recordings/rtx_pro_6000_x8_training.json"


def fit_scenario(folder: Path, weights_bytes: int | None = None
                 ) -> tuple[Path, Path, dict[str, str]]:
    """The model-fit scenario: a second inventory source beside inventory/lab (ct286, 8 GPUs,
    never created) with its own model store, and the environment that gives the lab node the
    recorded NVML answers of 8x RTX PRO 6000. ``weights_bytes`` makes the model's one shard a
    sparse file of that size; None leaves the model folder empty (not in the store yet).

    Returns (inventory file, model store, environment)."""
    store = folder / "models"
    (store / "big-model").mkdir(parents=True)
    if weights_bytes is not None:
        with open(store / "big-model/model-00001-of-00001.safetensors", "wb") as handle:
            handle.truncate(weights_bytes)
        (store / "big-model/config.json").write_text("{}")
    hosts = {"all": {"children": {
        "proxmox_nodes": {"hosts": {"localhost": {"proxmox_lxc_containers": [{
            "name": "ct286", "vmid": 286, "gpus": "all",
            "mounts": [{"host_path": str(store), "path": "/srv/models"}]}]}}},
        "sglang_servers": {"hosts": {"ct286": {
            "ansible_host": "10.0.3.30", "sglang_serve_enabled": True,
            "sglang_serve_gpu_count": 8, "sglang_serve_model_path": "big-model",
            "sglang_serve_mem_fraction_static": 0.88}}},
    }}}
    path = folder / "fit.yml"
    path.write_text(json.dumps(hosts))
    env = {"PYTHONPATH": str(REPO / "tests/standins/pynvml_recorded"),
           "FAKE_PYNVML_RECORDING": str(FIT_RECORDING)}
    return path, store, env


def wait_for_ssh(ip: str, timeout: float = 120) -> None:
    """Until the container's sshd accepts a connection (after a start or a reboot)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection((ip, 22), timeout=2):
                return
        except OSError:
            time.sleep(1)
    raise AssertionError(f"{ip}:22 did not come back")
