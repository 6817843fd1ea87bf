"""SGLang's own JIT builders in a provisioned lab container (no GPU, no route to package indexes).

One container per run (vmid 270), a linked clone of the suite's golden template
(tests/conftest.py golden_template): the toolchain play (role cuda_toolkit) and the whole pinned
stack (role sglang, from the lab's node cache), converged once for the test session through the
real roles, so the builders meet exactly what a served container has.

Then the real builders: torch ``cpp_extension`` (cub, ``cuda::std``, ``-lcudart``, arch 12.0),
flashinfer's JIT (``JitSpec.build`` of its activation kernel for SM120), Triton ahead of time for
``sm_120`` and Triton's own launcher build, and SGLang's ``ServerArgs`` on every command line
``roles/sglang_serve`` generates from the lab and example inventories. Figures go to
``artifacts/jit-builders-lab.json``.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shlex
import shutil
import threading
import time
from pathlib import Path

import pytest
import yaml
from ansible_collections.sglang_lxc.serving.plugins.module_utils.sglang_readiness import (
    ARGUMENT_SPEC as READINESS_ARGS,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils import serve_instances
from ansible_collections.sglang_lxc.serving.runner import lab_model

from tests.lablib import REPO, ansible_playbook, lab_root, pct

pytestmark = pytest.mark.lab

VMID = 270
# 10.0.3.270 is no address: the jit range 270-279 uses 10.0.3.170-179 (docs/CONVENTIONS.md).
ADDRESS = "10.0.3.170"
VENV = "/opt/sglang/venv"  # inventory/lab/group_vars/all/paths.yml sglang_lxc_venv
ENV_FILE = "/etc/sglang/cuda.env"
CACHE = "/var/cache/sglang"
LOCK = REPO / "roles/sglang/files/locks/sglang-0.5.12.txt"
SCRIPT = Path(__file__).parent / "scripts" / "builders.py"

FIGURES: dict[str, object] = {}
NO_ACCELERATOR = "RuntimeError: No accelerator (CUDA, XPU, HPU, NPU, MUSA, MPS) is available."


def lock_pins() -> list[str]:
    pins = []
    for line in LOCK.read_text().splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            pins.append(line)
    return pins


def sh(ct, command: str, check: bool = True):
    proc = ct.exec("bash", "-c", command, check=False)
    if check:
        assert proc.returncode == 0, f"{command}\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc


def builder(ct, *args: str, user: str = "root", env: str = "") -> dict:
    """Run scripts/builders.py in the container with the service environment."""
    command = (
        f"set -a; . {ENV_FILE}; {env} set +a; cd /tmp; "
        f"{VENV}/bin/python /opt/jit-test/builders.py {shlex.join(args)}"
    )
    if user != "root":
        command = f"runuser -u {user} -- bash -c {shlex.quote(command)}"
    proc = sh(ct, command)
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.fixture(scope="module")
def ct(lab_clone):
    """A linked clone of the suite's golden template (the toolchain and the whole pinned stack,
    converged once through the real roles: tests/conftest.py), for the module."""
    data = lab_root() / "data" / f"ct{VMID}"
    start = time.monotonic()
    container = lab_clone(
        VMID,
        ip=f"{ADDRESS}/24",
        mounts=[
            {"host_path": str(data / "models"), "path": "/srv/models"},
            {"host_path": str(data / "cache"), "path": CACHE},
        ],
    )
    FIGURES["clone_seconds"] = round(time.monotonic() - start, 1)
    FIGURES["venv_bytes"] = int(sh(container, f"du -sb {VENV}/ | cut -f1").stdout.split()[0])
    sh(container, "mkdir -p /opt/jit-test")
    pct("push", str(VMID), str(SCRIPT), "/opt/jit-test/builders.py")
    yield container
    # the generated model of the load-progress test (2.0 GB on the node's data mount)
    shutil.rmtree(data / "models" / "gen", ignore_errors=True)
    out = REPO / "artifacts" / "jit-builders-lab.json"
    out.parent.mkdir(exist_ok=True)
    out.write_text(json.dumps(FIGURES, indent=2) + "\n")
    print(f"\njit builders lab figures: {json.dumps(FIGURES)}")


def test_the_venv_holds_the_lock_pins_the_builders_load(ct):
    """The builders below run against the stack the sglang role installed (in the golden
    template), at the lock's exact pins."""
    names = ("torch", "triton", "flashinfer-python", "sglang", "nvidia-cuda-runtime")
    pins = {p.split("==")[0].lower(): p.split("==")[1] for p in lock_pins()}
    script = ("import json, importlib.metadata as m; "
              f"print(json.dumps({{n: m.version(n) for n in {list(names)!r}}}))")
    found = json.loads(sh(ct, f"{VENV}/bin/python -c {shlex.quote(script)}").stdout)
    assert found == {n: pins[n] for n in names}, found


def test_the_venv_links_into_the_node_uv_cache(ct):
    """The lab installs with uv's symlink mode (inventory/lab sglang_uv_link_mode): the builders
    below then run against a venv whose files are links into the node's shared uv cache, which
    the clone mounts as its golden template did."""
    target = sh(ct, f"readlink -f {VENV}/lib/python3.11/site-packages/torch/__init__.py").stdout
    assert target.startswith("/var/cache/sglang-lxc/node/uv/"), target


def test_torch_cpp_extension_builds_for_sm120(ct):
    out = builder(ct, "torch-ext", "/tmp/torch-ext")
    FIGURES["torch_extension_seconds"] = out["seconds"]
    assert out["has_block_sum"]
    gencodes = set(re.findall(r"-gencode=arch=compute_(\d+),code=sm_(\d+)", out["ninja"]))
    assert gencodes == {("120", "120")}, gencodes
    assert "-lcudart" in out["ninja"]
    needed = sh(ct, f"readelf -d {out['module']}").stdout
    assert "libcudart.so.13" in needed


def test_flashinfer_jit_builds_its_kernel_for_sm120(ct):
    out = builder(ct, "flashinfer", env=f"FLASHINFER_WORKSPACE_BASE={CACHE}/root-check;")
    FIGURES["flashinfer_jit_seconds"] = out["seconds"]
    assert re.search(r"compute_120f?,code=sm_120f?", out["ninja"]), out["ninja"][-2000:]
    assert "lib64/stubs" in out["ninja"] and "-lcuda" in out["ninja"]
    assert out["workspace"].endswith(("/120", "/120f")), out["workspace"]
    needed = sh(ct, f"readelf -d {out['library']}").stdout
    assert "[libcudart.so.13]" in needed  # linked with -lcudart -lcuda (-lcuda: lib64/stubs)


def test_triton_compiles_ahead_of_time_for_sm120(ct):
    out = builder(ct, "triton-aot")
    FIGURES["triton_aot_seconds"] = out["seconds"]
    assert out["triton"] == "3.6.0"
    assert out["ptx_target"].startswith("sm_120"), out
    assert out["cubin_bytes"] > 0


def test_triton_launcher_builds_with_python_h_cc_and_libcuda(ct):
    out = builder(ct, "triton-launcher", "/tmp/triton-launcher")
    FIGURES["triton_launcher_seconds"] = out["seconds"]
    assert out["python_h"]
    assert out["libcuda_from"] in ("ldconfig -p", "stub")
    needed = sh(ct, f"readelf -d {out['so']}").stdout
    assert "[libcuda.so.1]" in needed


def serve_settings(inventory: str) -> dict:
    """The role's defaults overlaid with an inventory's sglang_serve_* values (no templating),
    only the settings the role expands (serve_instances.SETTINGS), as the role passes them."""
    known = serve_instances.SETTINGS
    defaults = yaml.safe_load((REPO / "roles/sglang_serve/defaults/main.yml").read_text())
    inventory_file = REPO / f"inventory/{inventory}/group_vars/sglang_servers/serve.yml"
    values = yaml.safe_load(inventory_file.read_text())
    merged = {**defaults, **values}
    settings = {}
    for key, value in merged.items():
        name = key.removeprefix("sglang_serve_")
        if name == key or name not in known or (isinstance(value, str) and "{{" in value):
            continue
        settings[name] = value
    return settings


def generated_command_lines() -> list[list[str]]:
    lines = []
    for inventory, gpus in (("lab", 1), ("example", 8)):
        for has_key in (False, True):
            for instance in serve_instances.sglang_serve_instances(
                serve_settings(inventory), gpus, has_key
            ):
                if instance["argv"] not in lines:
                    lines.append(instance["argv"])
    return lines


def test_sglangs_argument_parser_accepts_every_generated_command_line(ct, tmp_path):
    """SGLang's own argparse (ServerArgs.add_cli_args) parses every command line the role
    generates from the lab and example inventories. ServerArgs.from_cli_args is tried too, but
    its __post_init__ asks torch for an accelerator first, so in a container without a GPU a GPU
    line stops there: what this proves is the parser. (SGLang's whole ServerArgs, __post_init__
    included, runs on the CPU lines, and the role runs the parser on the node before any change:
    tests/integration/serve.)"""
    lines = generated_command_lines()
    assert len(lines) >= 2
    local = tmp_path / "argv.json"
    local.write_text(json.dumps(lines))
    pct("push", str(VMID), str(local), "/opt/jit-test/argv.json")
    start = time.monotonic()
    out = builder(ct, "server-args", "/opt/jit-test/argv.json")
    FIGURES["server_args_seconds"] = round(time.monotonic() - start, 1)
    FIGURES["server_args_lines"] = len(lines)
    FIGURES["server_args_from_cli_args"] = [r.get("from_cli_args") for r in out["results"]]
    for entry in out["results"]:
        assert entry["parsed"], entry
        assert entry["port"] == int(entry["argv"][entry["argv"].index("--port") + 1])
        # from_cli_args runs ServerArgs.__post_init__, which asks torch for a device first: in a
        # container without a GPU that, and only that, may stop it
        if not entry["from_cli_args"]:
            assert entry["error"] == NO_ACCELERATOR, entry


def test_second_instance_reuses_the_warmed_jit_cache(ct):
    """The role's warm-up builds into the cache every instance's environment points at; a second
    process of the service user (the next instance) finds the module built and compiles nothing."""
    settings = {**serve_settings("lab"), "cache_dir": CACHE, "cuda_version": "13.0"}
    first, second = serve_instances.sglang_serve_instances(settings, 2)
    assert first["env"]["FLASHINFER_WORKSPACE_BASE"] == second["env"]["FLASHINFER_WORKSPACE_BASE"]
    warmup = REPO / "roles/sglang_serve/files/sglang-jit-warmup.py"
    pct("push", str(VMID), str(warmup), "/opt/jit-test/sglang-jit-warmup.py")
    sh(ct, "id sglang >/dev/null 2>&1 || useradd --system --no-create-home sglang")
    sh(ct, f"chown sglang {CACHE}")

    def run(instance) -> dict:
        env = {**instance["env"], "FLASHINFER_CUDA_ARCH_LIST": "12.0"}
        assignments = " ".join(f"{k}={shlex.quote(v)}" for k, v in env.items())
        command = (
            f"cd /tmp && runuser -u sglang -- env {assignments} {VENV}/bin/python "
            f"/opt/jit-test/sglang-jit-warmup.py --env-file {ENV_FILE} --modules activation"
        )
        return json.loads(sh(ct, command).stdout.strip().splitlines()[-1])

    built = run(first)
    assert built["workspace"].startswith(f"{CACHE}/cuda-13.0/.cache/flashinfer/"), built
    assert built["workspace"].endswith(("/120", "/120f")), built
    [module] = built["modules"]
    assert module["built"], built
    mtime = sh(ct, f"stat -c %Y.%Z {module['library']}").stdout.strip()
    owner = sh(ct, f"stat -c %U {module['library']}").stdout.strip()
    assert owner == "sglang"
    reused = run(second)
    [again] = reused["modules"]
    assert again["name"] == module["name"] and not again["built"], reused
    assert sh(ct, f"stat -c %Y.%Z {module['library']}").stdout.strip() == mtime
    FIGURES["warmup_first_seconds"] = module["seconds"]
    FIGURES["warmup_second_seconds"] = again["seconds"]


# --------------------------------------------------------------------------- serving (issue 19)
# The same container serves next, through the sglang_serve role: SGLang 0.5.12's own server on
# the CPU (as tests/integration/serve and inventory/lab's ct200 serve), its launcher, parser,
# scheduler and weight loader, on a generated 2.0 GB Llama (runner/lab_model.py, 64 layers in 40
# shards) read through a throttle, so that readiness reports a real load's progress; the unit is
# killed mid-load. (The tiny model's whole story, router and key included: tests/integration/serve.)
SERVE_KEY = "sk-jit-5d1e8b2a9c"  # never in any output, never on any command line
UNIT = "sglang@cpu0.service"
MODEL = "gen"
GEN = lab_model.Dims(hidden=1024, layers=64, heads=16, kv_heads=8, intermediate=4096, shards=40)
# IOReadBandwidthMax, bytes a second: 80 s of weight reads to the kill at 80%. SGLang's loader
# copies every tensor into the model as it reads: at 35 MB/s it fell to 27 MB/s (the throttle
# -22%) on two cores shared with the rest of the suite; 20 MB/s leaves it room.
THROTTLE = 20_000_000
# seconds: sglang_readiness's rate window for the rate (the role leaves the default)
RATE_WINDOW = READINESS_ARGS["rate_window"]["default"]
SERVE_VARS = {
    "sglang_serve_enabled": True,
    "sglang_serve_device": "cpu",
    "sglang_serve_attention_backend": "torch_native",
    "sglang_serve_instances": [{"name": "cpu0"}],
    "sglang_serve_model_path": MODEL,
    "sglang_serve_served_model_name": MODEL,
    "sglang_serve_extra_args": ["--max-total-tokens", "4096"],
    "sglang_serve_api_key": SERVE_KEY,
    # a report every 4 s plus one module round trip. Not 8 (tried to save rounds' CPU): beside
    # two busy loops the rates then read 26% above what was read between reports up to 62 s
    # apart (issue 44, 2026-12-08). Likely because a rate's 10 s window then lies in the
    # module's own quiet polling, not in the round's controller work between reports, which
    # slows the loader on busy cores
    "sglang_serve_report_interval": 4,
    # a start imports torch and SGLang in three processes before the weights: minutes on two
    # busy cores, moving
    "sglang_serve_stall_timeout": 300,
    "sglang_serve_ready_timeout": 900,
    "sglang_serve_restart_sec": 2,
}
SERVE_OUTPUTS: list[str] = []
# the bytes every process of the unit read from disk (SGLang's scheduler, a child, reads the
# weights): what readiness counts, read here to kill the unit at a known point of the load
UNIT_READS = (
    "cg=$(systemctl show -p ControlGroup --value {unit}); t=0; "
    "for p in $(cat /sys/fs/cgroup$cg/cgroup.procs /sys/fs/cgroup/unified$cg/cgroup.procs "
    "/sys/fs/cgroup/systemd$cg/cgroup.procs 2>/dev/null | sort -u); do "
    "r=$(sed -n 's/^read_bytes: //p' /proc/$p/io 2>/dev/null); t=$((t + ${{r:-0}})); done; "
    "echo $t"
)


def serve_play(ct, artifacts: Path | None = None, **changes):
    env = {"SGLANG_LXC_ARTIFACTS": str(artifacts)} if artifacts else None
    result = ansible_playbook("playbooks/serve.yml", ct.inventory,
                              extra_vars={**SERVE_VARS, **changes},
                              args=["--limit", ct.name], env=env)
    SERVE_OUTPUTS.append(result.output)
    return result


def out_of_page_cache(folder: Path) -> None:
    """Written to disk and dropped from the page cache (the node's, which the container's
    reads go through), so that the load reads the disk, through the throttle."""
    os.sync()
    for path in folder.iterdir():
        fd = os.open(path, os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def test_load_progress_of_sglangs_own_server_start_then_crashed(ct, tmp_path):
    """SGLang's own server starts and its loader reads a generated model through a read
    throttle; readiness reports percent, rate and ETA (as fields in todo.json) until the unit
    is killed mid-load, and then the crash, with SGLang's own log lines."""
    store = lab_root() / "data" / f"ct{VMID}" / "models"
    start = time.monotonic()
    lab_model.make(store / MODEL, GEN)
    out_of_page_cache(store / MODEL)
    FIGURES["model_make_seconds"] = round(time.monotonic() - start, 1)
    files = sorted((store / MODEL).glob("*.safetensors"))
    total = sum(f.stat().st_size for f in files)
    assert len(files) == GEN.shards
    sh(ct, f"mkdir -p /etc/systemd/system/{UNIT}.d && printf "
           f"'[Service]\\nIOReadBandwidthMax=/srv/models/{MODEL} {THROTTLE}\\n' "
           f"> /etc/systemd/system/{UNIT}.d/throttle.conf")
    artifacts = tmp_path / "artifacts"
    outcome: dict = {}

    def run() -> None:
        outcome["result"] = serve_play(ct, artifacts=artifacts)

    thread = threading.Thread(target=run)
    started = time.monotonic()
    thread.start()
    samples: list[dict] = []
    seen: list[dict] = []
    killed_at = None
    while thread.is_alive() and time.monotonic() - started < 900:
        time.sleep(0.5)
        try:
            todos = json.loads((artifacts / "latest" / "todo.json").read_text())["todos"]
        except (OSError, ValueError, KeyError):
            continue  # not written yet
        for todo in todos:
            for entry in (todo.get("activity") or {}).get("instances", []):
                if entry.get("name") == "cpu0" and entry not in seen:  # a new round's report
                    seen.append(entry)
                    samples.append({**entry, "t": round(time.monotonic() - started, 1)})
        last = samples[-1] if samples else {}
        if killed_at is None and (last.get("percent") or 0) >= 50:
            # near the end: read the unit's own counters each half second and kill it at 80%
            read = sh(ct, UNIT_READS.format(unit=UNIT), check=False).stdout.strip()
            if read.isdigit() and int(read) >= 0.8 * total:
                sh(ct, f"systemctl kill -s KILL {UNIT}")
                killed_at = round(int(read) * 100 / total)
    thread.join(timeout=120)
    FIGURES["load_run_seconds"] = round(time.monotonic() - started, 1)
    assert killed_at is not None, ("the load was not killed at 80%", samples[-5:])
    result = outcome.get("result")
    assert result is not None, ("the play still runs after the kill", samples[-5:])
    loading = [s for s in samples if s["state"] == "loading" and s.get("total_bytes")]
    # The weights under way (the first report with an ETA: 2% read), and the rate's whole window
    # (RATE_WINDOW) on them: before, the unit imports torch and SGLang (77 s on two busy cores,
    # their libraries' reads count too).
    weights_from = next((s["elapsed_s"] for s in loading if s.get("eta_s")), float("inf"))
    moving = [s for s in loading if s.get("rate_bps") and s.get("eta_s")
              and s["elapsed_s"] >= weights_from + RATE_WINDOW]
    FIGURES["load"] = {
        "total_bytes": total, "throttle_bps": THROTTLE, "killed_at_percent": killed_at,
        "samples": [{k: s.get(k) for k in ("elapsed_s", "percent", "rate_bps", "eta_s", "text")}
                    for s in loading],
        "rate_errors": [round(s["rate_bps"] / THROTTLE - 1, 3) for s in moving],
        # when each report expects the load to end (seconds since the instance was first seen)
        "predicted_end": [s["elapsed_s"] + s["eta_s"] for s in moving],
        "hung": result.output.count(" hung"),
    }
    assert result.rc != 0, str(result)
    # SGLang's parser ran (in the serving venv) before anything was written
    assert re.search(r"Parse each instance's arguments with SGLang's own parser[^\n]*\*+\nok: ",
                     result.output), result.output
    elapsed = [s["elapsed_s"] for s in loading]
    assert elapsed == sorted(set(elapsed)), elapsed  # each report is a new round's
    percents = [s["percent"] for s in loading]
    assert percents == sorted(percents), percents  # a load never goes back
    assert all(s["total_bytes"] == total for s in loading)
    # The throttle holds the weights' reads for 80 s before the kill: every round in them
    # reports (a round took 4-17 s, the latter under the suite's load), so at least two reports
    # have a rate window wholly on the weights, and those are tens of seconds apart.
    assert len(moving) >= 2 and moving[-1]["elapsed_s"] - moving[0]["elapsed_s"] >= 10, loading
    # The rate is what the unit read: not above the throttle (the reads cannot pass it; a rate
    # of read calls or of another process's reads would; 20%: the kernel counts a read when it
    # is issued, before the throttle holds it), and over the reports what the percents moved by
    # between the first and the last of them. Each rate is of the window before its report, so
    # each weighs as much as the time since the report before it (reports come 4-17 s apart:
    # a plain mean would weigh a burst of close reports as much as a long gap)
    assert all(s["rate_bps"] <= 1.2 * THROTTLE for s in moving), moving
    first, last = moving[0], moving[-1]
    span = last["elapsed_s"] - first["elapsed_s"]
    read = (last["done_bytes"] - first["done_bytes"]) / span
    mean = sum(s["rate_bps"] * (s["elapsed_s"] - before["elapsed_s"])
               for before, s in itertools.pairwise(moving)) / span
    assert abs(mean / read - 1) <= 0.25, (mean, read, moving)
    # and each ETA is what is left at that rate (whole seconds)
    for s in moving:
        assert abs(s["eta_s"] - (total - s["done_bytes"]) / s["rate_bps"]) <= 1, s
    assert " hung" not in result.output
    assert f"{UNIT} crashed" in result.output, str(result)
    assert f"log lines of {UNIT}:" in result.output
    tail = result.output.split(f"log lines of {UNIT}:", 1)[1]
    # the first quote: the report's lines, up to the next task's header (the error repeats it).
    # Not up to systemd's "Failed with result": readiness can call the unit crashed while it is
    # still deactivating, before systemd logs that line (a stressed round on df367d1 did)
    quote = re.split(r"\n(?:TASK \[|PLAY RECAP)", tail, maxsplit=1)[0]
    # SGLang's model runner, then the kill: the shard bar's updates (journald lets them out after
    # systemd's exit lines, one line each) are quoted as their last one, so they cannot push the
    # runner's line out of the 20 (CI on 13c3052: 15 updates did; nor can systemd's line for
    # each process it sent the SIGKILL, 17 in CI on 53d7f62)
    assert "Load weight begin" in quote, tail[:4000]
    assert quote.count("Multi-thread loading shards:") <= 1, tail[:4000]
    for output in SERVE_OUTPUTS:
        assert SERVE_KEY not in output
