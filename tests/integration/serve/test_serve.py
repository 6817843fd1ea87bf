"""sglang_serve and sglang_router on a real lab container, serving SGLang 0.5.12 itself on CPU.

One container (vmid 250), a linked clone of the suite's golden template (tests/conftest.py
golden_template: the toolchain and the pinned stack converged once through the real roles), with
the lab's tiny Llama (runner/lab_model.py) in its model store. Its two instances (cpu0, cpu1) are
SGLang's own server, scheduler and detokenizer (sglang_serve_device: cpu, as inventory/lab's ct200
serves), and the router in front is the real sglang-router. Nothing here imitates SGLang.

The module goes through the whole story in file order: bad input rejected before any change,
check mode, converge (loading, then healthy, from SGLang's own log lines), idempotence, a bad
argument refused by SGLang's parser, the router (ready once a completion went through it; every
port on loopback; the Prometheus targets parsed), a scheduler killed under traffic through the
router and a converge run while its unit waits in auto-restart, a rolling restart under client
traffic, a one-instance change that restarts only it and whose load is then frozen (hung), a
crashed load, removal, every instance stopped under traffic and converged again, a reboot, and
the API key kept out of every output and command line. Instance starts are the cost (about 30
CPU s each), so each test reuses the state the one before it left, and the order is the one that
needs the fewest: seven full starts (the router finds both instances up; the fault drills chain
onto the starts the story has; the one-instance change's start is the one frozen; the crashed
instance is held, not restarted; the outage and the reboot, after the removal, bring back one).
"""

from __future__ import annotations

import json
import re
import shutil
import threading
import time
from pathlib import Path

import pytest
import yaml

from tests.infra.cmdline_scan import CMDLINE_SCAN
from tests.lablib import ansible_playbook, lab_root, pct, wait_for_ssh
from tests.loaders import ROOT

pytestmark = pytest.mark.lab

VMID = 250
KEY = "sk-test-7f3a9c1e5b"  # must never appear in any output
MODEL = "tiny-llama"
BROKEN = "tiny-llama-truncated"
SERVE = "playbooks/serve.yml"
ROLLING = "playbooks/rolling_restart.yml"
CPU_LIB = "/usr/local/libexec/sglang/cpu-lib"  # sglang_serve_cpu_lib_dir's default
MAX_TOKENS = ["--max-total-tokens", "4096"]  # inventory/lab/host_vars/ct200/serve.yml
BASE = {
    "sglang_serve_enabled": True,
    "sglang_serve_device": "cpu",
    "sglang_serve_attention_backend": "torch_native",
    "sglang_serve_model_path": MODEL,
    "sglang_serve_served_model_name": "tiny",
    "sglang_serve_instances": [{"name": "cpu0"}, {"name": "cpu1"}],
    "sglang_serve_extra_args": MAX_TOKENS,
    "sglang_serve_api_key": KEY,
    # a report every 15 s (the role's default is 30): a round costs about 2 CPU s (the readiness
    # module in the container, its controller tasks), which the instances' start waits for on two
    # cores; at 3 s the rounds took 41 CPU s of a 98 s wait, at 15 s 9 CPU s of 61 s (ct200).
    # A hung or crashed instance is still seen within the round, at the module's 1 s poll.
    "sglang_serve_report_interval": 15,
    # a start imports torch and SGLang in three processes: minutes on two busy cores, moving
    "sglang_serve_stall_timeout": 300,
    "sglang_serve_ready_timeout": 900,
    "sglang_serve_restart_sec": 2,
}
ROUTER = {
    "sglang_router_enabled": True,
    "sglang_router_policy": "round_robin",
    "sglang_router_ready_timeout": 600,
}
NAMES = ("cpu0", "cpu1")
ONE = [{"name": "cpu0"}]  # after the removal drill
OUTPUTS: list[str] = []
FIGURES: dict[str, object] = {}

# systemd-analyze security: the hardened units score 3.1 ("OK"); a regression fails here.
EXPOSURE_FLOOR = 3.5
_EXPOSURE = re.compile(r"Overall exposure level for (\S+): ([0-9.]+)")


def exposures(text: str) -> dict[str, float]:
    """Exposure level per unit from `systemd-analyze security` lines in ``text``."""
    return {m.group(1): float(m.group(2)) for m in _EXPOSURE.finditer(text)}


def variables(**changes):
    return {**BASE, **changes}


def instances(**per_instance) -> list[dict]:
    """cpu0 and cpu1, with ``cpu1={...}`` style changes merged in."""
    return [{"name": n, **per_instance.get(n, {})} for n in NAMES]


@pytest.fixture(scope="module")
def ct(lab_clone):
    from ansible_collections.sglang_lxc.serving.runner import lab_model

    container = lab_clone(VMID)  # first: a container's making clears its data folder
    store = lab_root() / "data" / f"ct{VMID}" / "models"
    lab_model.make(store / MODEL)
    # a copy with its second shard cut in half: SGLang's loader must fail on it
    broken = store / BROKEN
    shutil.copytree(store / MODEL, broken)
    shard = broken / "model-00002-of-00002.safetensors"
    with open(shard, "r+b") as handle:
        handle.truncate(shard.stat().st_size // 2)
    return container


def play(ct, playbook=SERVE, check=False, args=None, env=None, **changes):
    result = ansible_playbook(playbook, ct.inventory, extra_vars=variables(**changes),
                              check=check, args=["--limit", ct.name, *(args or [])], env=env)
    OUTPUTS.append(result.output)
    (ct.workdir / f"play-{len(OUTPUTS):02d}.log").write_text(result.output)
    return result


def sh(ct, command: str, check: bool = True) -> str:
    return ct.exec("sh", "-c", command, check=check).stdout


def show(ct, unit: str, prop: str) -> str:
    return sh(ct, f"systemctl show -p {prop} --value {unit}").strip()


def invocations(ct, names=NAMES) -> dict[str, str]:
    return {n: show(ct, f"sglang@{n}.service", "InvocationID") for n in names}


def main_pids(ct, names=NAMES) -> dict[str, str]:
    return {n: show(ct, f"sglang@{n}.service", "MainPID") for n in names}


def unit_installed(ct) -> bool:
    return sh(ct, "test -e /etc/systemd/system/sglang@.service && echo yes", check=False) == "yes\n"


def http(ct, port: int, path: str, key: str | None = None, body: dict | None = None) -> str:
    """The HTTP status of a request from inside the container (the servers bind loopback)."""
    header = f"-H 'Authorization: Bearer {key}'" if key else ""
    data = f"-H 'Content-Type: application/json' -d '{json.dumps(body)}'" if body else ""
    return sh(
        ct,
        f"curl -s -m 60 -o /dev/null -w '%{{http_code}}' {header} {data} "
        f"http://127.0.0.1:{port}{path}",
        check=False,
    )


CHAT = {"model": "tiny", "max_tokens": 4, "messages": [{"role": "user", "content": "hello"}]}


def wait_until(predicate, timeout: float, step: float = 2) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(step)
    return False


def test_lab_without_gpu_skips_serving(ct):
    result = ct.run_playbook(SERVE)  # the lab inventory alone: sglang_lxc_gpus_expected 0
    OUTPUTS.append(result.output)
    assert result.rc == 0, str(result)
    assert "Skipping SGLang serving on ct250: no GPU" in result.output
    assert not unit_installed(ct)
    # the only changes are the records of the skips (serve, router), which tests/infra reads
    changed_tasks = re.findall(r"TASK \[([^\]]+)\] \*+\nchanged:", result.output)
    assert changed_tasks, result.output
    assert all(t.startswith("sglang_lxc.serving.deploy_record :")
               for t in changed_tasks), changed_tasks
    record = json.loads(sh(ct, "cat /etc/sglang/deployed/sglang_serve.json"))
    assert (record["status"], record["reason"]) == ("skipped", "no GPU"), record
    again = ct.run_playbook(SERVE)
    assert again.rc == 0, str(again)
    assert again.changed == 0, str(again)


GPU = {"sglang_serve_device": "cuda", "sglang_serve_gpu_count": 4, "sglang_serve_instances": []}


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        (
            {"sglang_serve_instances": [{"name": "a", "port": 31000},
                                        {"name": "b", "port": 31000}]},
            ["both use port 31000"],
        ),
        (
            {**GPU, "sglang_serve_instances": [{"name": "a", "gpus": [0, 1]},
                                               {"name": "b", "gpus": [1]}]},
            ["GPU 1 is given to both a and b"],
        ),
        ({**GPU, "sglang_serve_gpus": [7]}, ["GPU index 7", "sglang_serve_gpu_count = 4"]),
        ({"sglang_serve_instances": [{"name": "a", "gpus": [0]}]},
         ["a CPU instance (sglang_serve_device = cpu) takes no GPUs"]),
        ({"sglang_serve_attention_backend": "flashinfer"},
         ["sglang_serve_attention_backend", "torch_native"]),
        ({"sglang_serve_mem_fraction_static": 1.5}, ["sglang_serve_mem_fraction_static"]),
        (
            {"sglang_serve_eagle3_draft_model_path": "draft", "sglang_serve_eagle3_topk": 4},
            ["sglang_serve_eagle3_num_steps", "sglang_serve_eagle3_num_draft_tokens"],
        ),
        (
            {"sglang_serve_host": "0.0.0.0", "sglang_serve_api_key": ""},
            ["sglang_serve_host", "sglang_serve_api_key"],
        ),
    ],
    ids=["port-twice", "gpu-twice", "unknown-gpu", "cpu-with-gpus", "gpu-backend-on-cpu",
         "mem-fraction", "eagle3-half", "open-no-key"],
)
def test_bad_input_rejected_before_any_change(ct, changes, words):
    result = play(ct, **changes)
    assert result.rc != 0, str(result)
    assert result.changed == 0, str(result)
    for word in words:
        assert word in result.output, str(result)
    assert not unit_installed(ct)


# Everything the serve play installs or starts (the role's defaults): units and their drop-ins
# and links, the instances' files and deploy records, the launcher, the account's home and
# caches, readiness records, the accounts, and systemd's list of sglang units. (Not SGLang's
# argument check's verdict cache, /var/cache/sglang-lxc/args-check: the check runs in check mode
# too, and keeps its verdict there.)
INSTALLED = ("/etc/systemd/system /run/systemd/system /etc/sglang /usr/local/libexec/sglang "
             "/var/lib/sglang /var/cache/sglang /run/sglang-lxc")
ACCOUNTS = "/etc/passwd /etc/group /etc/shadow /etc/gshadow"


def footprint(ct) -> str:
    """Every path under INSTALLED and the account files, with type, mode, owner, size, mtime
    and ctime (a write, chmod or chown moves the ctime), the sglang units that run or failed,
    and those installed."""
    return sh(ct, f"find {INSTALLED} {ACCOUNTS} -printf '%p %y %m %u:%g %s %T@ %C@\\n' "
                  "2>&1 | sort; systemctl list-units --no-legend --plain 'sglang*'; "
                  "systemctl list-unit-files --no-legend 'sglang*'", check=False)


def test_check_mode_on_a_fresh_host_predicts_changes_and_writes_nothing(ct):
    """Check mode reports the changes it would make (so it cannot pass by doing nothing), and
    the host stays as it was: it cannot honestly report 0 changes on a host to be installed."""
    assert not unit_installed(ct)
    before = footprint(ct)
    result = play(ct, check=True)
    assert result.rc == 0, str(result)
    assert result.changed > 0, str(result)
    assert footprint(ct) == before


# The converge's instances start behind a gate, for that start only: a runtime drop-in (under
# /run, removed after the test) runs the template's own ExecStart once the gate file is there.
# The test opens the gate once a readiness round has reported both instances not yet healthy,
# so the report of their load lands however fast the machine starts SGLang.
GATE = "/run/sglang-lxc-test-gate"
GATE_DROPIN = "/run/systemd/system/sglang@.service.d/zz-test-gate.conf"
GATED = (
    "[Service]\n"
    "ExecStart=\n"
    f"ExecStart=/bin/sh -c 'until [ -e {GATE} ]; do sleep 0.2; done; "
    "exec /usr/local/libexec/sglang/sglang-instance %i'\n"  # the template's ExecStart
)


def reported_states(artifacts) -> dict[str, str]:
    """name -> state in the last readiness round the run's todo.json holds ({} before one)."""
    try:
        todos = json.loads((artifacts / "latest" / "todo.json").read_text())["todos"]
    except (OSError, ValueError, KeyError):
        return {}
    return {entry["name"]: entry["state"] for todo in todos
            for entry in (todo.get("activity") or {}).get("instances", [])
            if "name" in entry and "state" in entry}


def test_converge_reports_loading_then_healthy(ct, tmp_path):
    dropin = tmp_path / "gate.conf"
    dropin.write_text(GATED)
    sh(ct, f"rm -f {GATE}; mkdir -p {GATE_DROPIN.rsplit('/', 1)[0]}")
    pct("push", str(VMID), str(dropin), GATE_DROPIN)
    sh(ct, "systemctl daemon-reload")
    artifacts = tmp_path / "artifacts"
    outcome: dict = {}
    thread = threading.Thread(target=lambda: outcome.update(
        result=play(ct, env={"SGLANG_LXC_ARTIFACTS": str(artifacts)})))
    started = time.monotonic()
    thread.start()
    try:
        # a play that ends before a round reported (an error) opens the gate at once
        wait_until(lambda: not thread.is_alive() or (
            set(NAMES) <= {n for n, s in reported_states(artifacts).items() if s != "healthy"}),
            timeout=900, step=0.5)
        sh(ct, f"touch {GATE}")
        thread.join()
    finally:
        sh(ct, f"touch {GATE}; rm -f {GATE_DROPIN}; systemctl daemon-reload; rm -f {GATE}",
           check=False)
    FIGURES["converge_seconds"] = round(time.monotonic() - started, 1)
    result = outcome["result"]
    assert result.rc == 0, str(result)
    assert result.changed > 0
    # between the start and healthy, a round saw each instance loading (ansible folds long lines)
    text = " ".join(result.output.split())
    for name in NAMES:
        assert re.search(rf"sglang@{name}\.service \(CPU, port 3000\d\): (loading|warming)",
                         text), result.output[-4000:]
    assert "2/2 healthy" in result.output
    assert re.search(r"INSTANCE\s+GPU\s+PORT\s+MEMORY\s+HTTP\s+STATE", result.output)
    levels = exposures(result.output)
    assert {f"sglang@{n}.service" for n in NAMES} <= set(levels), levels
    for unit, level in levels.items():
        assert level <= EXPOSURE_FLOOR, f"{unit}: systemd-analyze security exposure {level}"
    # SGLang's own log lines, in its own order, in the unit's journal
    journal = sh(ct, "journalctl --no-pager -o cat -u sglang@cpu0.service")
    lines = ["Load weight begin", "Load weight end", "The server is fired up and ready to roll!"]
    at = [journal.find(line) for line in lines]
    assert -1 not in at and at == sorted(at), journal[-3000:]


def test_instances_serve_with_their_ports_key_and_environment(ct):
    for index, name in enumerate(NAMES):
        port = 30000 + index
        assert http(ct, port, "/health") == "200"
        assert http(ct, port, "/v1/models") == "401"
        assert http(ct, port, "/v1/models", KEY) == "200"
        assert http(ct, port, "/v1/chat/completions", KEY, CHAT) == "200"
        pid = show(ct, f"sglang@{name}.service", "MainPID")
        environ = sh(ct, f"tr '\\0' '\\n' < /proc/{pid}/environ")
        assert "SGLANG_USE_CPU_ENGINE=1\n" in environ
        assert "HF_HUB_OFFLINE=1\n" in environ
        assert f"LD_LIBRARY_PATH={CPU_LIB}" in environ
        assert "CUDA_VISIBLE_DEVICES=\n" in environ  # a CPU instance sees no GPU
        assert show(ct, f"sglang@{name}.service", "User") == "sglang"
    # the toolkit's stub as libcuda.so.1, in the CPU instances' private folder only
    assert sh(ct, f"readlink {CPU_LIB}/libcuda.so.1").strip().endswith("stubs/libcuda.so")
    args = sh(ct, "cat /etc/sglang/instances/cpu1.args").split("\n")
    assert args[args.index("--device") + 1] == "cpu"
    assert args[args.index("--attention-backend") + 1] == "torch_native"
    assert args[args.index("--port") + 1] == "30001"
    assert "--sleep-on-idle" in args
    assert (
        sh(
            ct,
            "systemd-analyze verify /etc/systemd/system/sglang@.service:sglang@x.service"
            " 2>&1; echo rc=$?",
        )
        .strip()
        .endswith("rc=0")
    )


def test_testinfra_checks_pass(ct):
    done = ct.testinfra("tests/infra/test_sglang_serve.py")
    assert done.returncode == 0, done.stdout + done.stderr
    # pytest's summary line: checks that ran and passed, none skipped (tests/infra skips a
    # module whose deploy record says "skipped", and exits 0 for it)
    summary = done.stdout.strip().splitlines()[-1] if done.stdout.strip() else ""
    passed = re.search(r"\b(\d+) passed\b", summary)
    assert passed and int(passed.group(1)) > 0, done.stdout[-4000:] + done.stderr
    assert not re.search(r"skipped|failed|error|xfail|xpass|deselected", summary), summary


def test_rerun_changes_nothing_parses_nothing_and_publishes_the_verdict(ct):
    pids = main_pids(ct)
    started = time.monotonic()
    result = ansible_playbook(
        SERVE,
        ct.inventory,
        extra_vars=variables(),
        args=["--limit", ct.name, "-v"],
        env={"ANSIBLE_SHOW_CUSTOM_STATS": "1"},
    )
    FIGURES["serve_noop_rerun_seconds"] = round(time.monotonic() - started, 1)
    OUTPUTS.append(result.output)
    assert result.rc == 0, str(result)
    assert result.changed == 0, str(result)
    assert main_pids(ct) == pids
    # nothing drifted: SGLang's parser is not run again
    assert re.search(r"Parse each instance's arguments with SGLang's own parser[^\n]*\*+\n"
                     r"skipping: ", result.output), result.output
    stats = result.output.split("CUSTOM STATS", 1)[1]
    assert re.search(r"todo_details.*ct250.*2/2 healthy", stats, re.S), stats
    # each instance was judged by its scheduler (/server_info), not by /health: the converge's
    # readiness recorded that this invocation of the unit generated a token, and this run's
    # report quotes that record's time (sglang_unit_probes.observe, sglang_readiness.classify)
    text = " ".join(result.output.split())
    for index, name in enumerate(NAMES):
        unit = f"sglang@{name}.service"
        record = json.loads(sh(ct, f"cat /run/sglang-lxc/readiness/{unit}.json"))
        assert record["invocation"] == show(ct, unit, "InvocationID"), record
        at = sh(ct, f"date -d @{record['at']} +%H:%M:%S").strip()
        line = (rf"{re.escape(unit)} \(CPU, port {30000 + index}\): healthy for [0-9:]+ - ready "
                rf"\(scheduler answers; /health generated a token at {at}, same start\)")
        assert re.search(line, text), (line, result.output[-4000:])
    # what SGLang resolved for them, from their /server_info (the lab sets torch_native)
    assert "cpu0, cpu1: attention torch_native" in text, result.output[-4000:]


def test_check_mode_after_converge_changes_nothing(ct):
    result = play(ct, check=True)
    assert result.rc == 0, str(result)
    assert result.changed == 0, str(result)


def test_explicit_ports_equal_to_the_defaults_change_nothing(ct):
    result = play(ct, sglang_serve_instances=[{"name": "cpu0", "port": 30000},
                                              {"name": "cpu1", "port": 30001}])
    assert result.rc == 0, str(result)
    assert result.changed == 0, str(result)


def unit_state(ct) -> dict:
    """What a refused run must not change: the files' digests, the PIDs, the invocations."""
    files = sh(ct, "sha1sum /etc/systemd/system/sglang@.service /etc/sglang/instances/*")
    return {"files": files, "pids": main_pids(ct), "invocations": invocations(ct)}


def test_a_bad_argument_is_refused_by_sglangs_parser_before_any_change(ct):
    before = unit_state(ct)
    bad = "--chunked-prefill-size=8192; touch /tmp/pwned"
    started = time.monotonic()
    result = play(ct, sglang_serve_extra_args=[*MAX_TOKENS, bad])
    FIGURES["bad_argument_refused_seconds"] = round(time.monotonic() - started, 1)
    assert result.rc != 0, str(result)
    assert bad in result.output, str(result)
    assert "invalid int value: '8192; touch /tmp/pwned'" in result.output  # SGLang's own text
    assert result.changed == 0, str(result)
    assert unit_state(ct) == before  # unit, files, PIDs and invocations
    assert http(ct, 30000, "/health") == "200"
    assert sh(ct, "test -e /tmp/pwned || echo absent").strip() == "absent"


def listeners(ct) -> list[tuple[str, str]]:
    """(local address:port, process) of every listening TCP socket in the container."""
    out = []
    for line in sh(ct, "ss -Hltnp").splitlines():
        fields = line.split()
        process = re.search(r'users:\(\("([^"]+)"', line)
        out.append((fields[3], process.group(1) if process else "?"))
    return out


def test_router_in_front_is_ready_when_a_completion_goes_through_it(ct, tmp_path):
    started = time.monotonic()
    before = invocations(ct)
    artifacts = tmp_path / "artifacts"
    result = play(ct, **ROUTER,  # the router alone starts
                  env={"SGLANG_LXC_ARTIFACTS": str(artifacts)})
    FIGURES["router_seconds"] = round(time.monotonic() - started, 1)
    assert result.rc == 0, str(result)
    assert "2/2 healthy" in result.output
    # ready means a client was served: a one-token completion through the router, with the key
    text = " ".join(result.output.split())
    ready = re.search(r"is ready: 2/2 workers healthy; a completion through the router in "
                      r"([0-9.]+) s", text)
    assert ready, result.output[-4000:]
    FIGURES["router_readiness_completion_seconds"] = float(ready.group(1))
    todos = json.loads((artifacts / "latest" / "todo.json").read_text())["todos"]
    assert any("a completion through the router in" in (t.get("details") or "")
               for t in todos), todos
    assert invocations(ct) == before  # no instance restarted for the router
    # both in the router's list, healthy (a check that timed out on busy cores may mark one
    # unhealthy for a moment: the next one marks it back)
    def healthy() -> list[str]:
        workers = json.loads(sh(ct, "curl -s http://127.0.0.1:30080/workers") or "{}")
        return sorted(w["url"] for w in workers.get("workers", []) if w.get("is_healthy"))
    assert wait_until(lambda: healthy() == ["http://127.0.0.1:30000", "http://127.0.0.1:30001"],
                      timeout=120), healthy()
    # the workers' key guards the router's clients: the router passes the header on
    assert http(ct, 30080, "/v1/chat/completions", None, CHAT) == "401"
    assert http(ct, 30080, "/v1/chat/completions", KEY, CHAT) == "200"
    unit = sh(ct, "systemctl cat sglang-router.service")
    assert "--policy round_robin" in unit
    for flag in ("--health-check-interval-secs 2", "--health-failure-threshold 2",
                 "--cb-timeout-duration-secs 5"):  # the role's measured defaults
        assert flag in unit, flag
    # nothing listens beyond the address its service was given (all loopback here): the
    # router, its Prometheus endpoint (sglang-router's default: 0.0.0.0), the instances and
    # their schedulers' process groups (torch's TCPStore binds [::] unless SGLang is given a
    # FileStore: roles/sglang_serve/files/sglang-launch.py). sshd is the container's own.
    found = listeners(ct)
    FIGURES["listeners"] = sorted({f"{address} {process}" for address, process in found})
    wide = [(a, p) for a, p in found if p != "sshd" and not a.startswith("127.0.0.1:")]
    assert not wide, found
    assert {"127.0.0.1:29000", "127.0.0.1:30080", "127.0.0.1:30000", "127.0.0.1:30001"} <= {
        a for a, _ in found}, found
    # the run's Prometheus file_sd targets: every instance and the router, each /metrics read
    # by prometheus_client's own parser (SGLang's dependency, in the serving venv)
    targets = json.loads((artifacts / "latest" / "prometheus_targets.json").read_text())
    listed = {t for entry in targets for t in entry["targets"]}
    assert listed == {"127.0.0.1:30000", "127.0.0.1:30001", "127.0.0.1:29000"}, targets
    jobs = {entry["labels"]["job"] for entry in targets}
    assert jobs == {"sglang", "sglang-router"}, targets
    record = json.loads(sh(ct, "cat /etc/sglang/deployed/sglang_router.json"))
    assert record["published"]["prometheus_targets"] == [
        e for e in targets if e["labels"]["job"] == "sglang-router"], record
    for target in sorted(listed):
        port = target.rsplit(":", 1)[1]
        families = json.loads(ct.exec(f"{VENV}/bin/python", "-c", PARSE_METRICS, port).stdout)
        assert families, target
        if port == "30000":
            assert any(name.startswith("sglang") for name in families), families
        if port == "29000":  # the router's breakers and worker health, which the drills read
            assert {"smg_worker_cb_state", "smg_worker_health"} <= set(families), families
    security = sh(ct, "systemd-analyze security --no-pager sglang-router.service")
    level = exposures(security)["sglang-router.service"]
    assert level <= EXPOSURE_FLOOR, f"sglang-router.service exposure {level}"


# The fault drills' client (tests/integration/serve/chaos_client.py), in the container: one-token
# completions through the router the whole time, each one counted, and what the router says of
# each worker every 0.25 s. Times are CLOCK_MONOTONIC, as systemd's and the journal's.
CLIENT = "/root/chaos_client.py"


class Client:
    def __init__(self, ct, name: str):
        self.ct, self.folder, self.outcome = ct, f"/root/chaos-{name}", {}
        pct("push", str(VMID), str(Path(__file__).with_name("chaos_client.py")), CLIENT)
        sh(ct, f"rm -rf {self.folder}; mkdir -p {self.folder}")
        self.thread = threading.Thread(target=lambda: self.outcome.update(run=ct.exec(
            "/usr/bin/python3", CLIENT, KEY, self.folder, "1800", check=False)))

    def __enter__(self):
        self.thread.start()
        # drills begin once a request has been answered through the router
        assert wait_until(lambda: not self.thread.is_alive() or self.exists("first"),
                          timeout=300, step=0.5) and self.exists("first"), self.outcome
        return self

    def __exit__(self, *exc):
        self.ct.exec("touch", f"{self.folder}/stop", check=False)
        self.thread.join(timeout=120)

    def exists(self, name: str) -> bool:
        return sh(self.ct, f"test -e {self.folder}/{name} && echo yes", check=False) == "yes\n"

    def read(self, name: str) -> list:
        return [json.loads(line) for line in
                sh(self.ct, f"cat {self.folder}/{name}.jsonl", check=False).splitlines()
                if line.strip()]

    def summary(self) -> dict:
        lines = self.outcome["run"].stdout.strip().splitlines()
        assert lines, self.outcome["run"].stderr
        return json.loads(lines[-1])


def now(ct) -> float:
    """The container's CLOCK_MONOTONIC, in seconds."""
    return float(sh(ct, "python3 -c 'import time; print(time.monotonic())'"))


def out_of_rotation(entry) -> bool:
    """The router sends the worker nothing: not healthy in /workers, or its breaker open."""
    return entry is not None and (entry[0] is False or entry[1] == 1)


def left_at(watch: list, url: str, since: float) -> float | None:
    return next((t for t, seen in watch if t >= since and out_of_rotation(seen.get(url))), None)


# How late the router may take a worker out, by its own timers (the role's defaults, which the
# lab keeps): the next check, then every failed check of the threshold at its whole timeout; and
# how late the watcher may see it (one round: /workers, /metrics and a worker's /health, 5 s each,
# then its 0.25 s pace). Timers and timeouts, not CPU work: busy cores do not stretch them.
# (sglang-router's own defaults, a check every 60 s and 3 failures, take up to 195 s.)
ROUTER_DEFAULTS = yaml.safe_load((ROOT / "roles/sglang_router/defaults/main.yml").read_text())
LEAVE_BOUND_S = (ROUTER_DEFAULTS["sglang_router_health_failure_threshold"]
                 * (ROUTER_DEFAULTS["sglang_router_health_check_interval_secs"]
                    + ROUTER_DEFAULTS["sglang_router_health_check_timeout_secs"])
                 + 3 * 5 + 0.25)


def own_health_at(ct, name: str, since: float) -> float | None:
    """When the instance first answered its own /health 200 after ``since`` (its access log,
    monotonic: the router's checks and the role's readiness ask it)."""
    log = sh(ct, f"journalctl --no-pager -o short-monotonic -u sglang@{name}.service")
    stamps = [float(m.group(1)) for m in re.finditer(
        r'^\[\s*([0-9.]+)\][^\n]*"GET /health HTTP/1\.1" 200', log, re.M)]
    return next((t for t in stamps if t > since), None)


def back_at(watch: list, url: str, since: float) -> float | None:
    """When the router next sent the worker a request that succeeded, after ``since``."""
    before = [seen[url][2] for t, seen in watch if t <= since and url in seen]
    floor = max(before) if before else 0
    return next((t for t, seen in watch if t > since and url in seen and seen[url][2] > floor),
                None)


def hold(ct, unit: str) -> None:
    """Keep ``unit`` in auto-restart once it crashes (a runtime drop-in: RestartSec=900), instead
    of systemd starting it again after the lab's 2 s."""
    sh(ct, f"mkdir -p /run/systemd/system/{unit}.d && printf '[Service]\\nRestartSec=900\\n' "
           f"> /run/systemd/system/{unit}.d/zz-test-hold.conf && systemctl daemon-reload")


def release(ct, unit: str) -> None:
    sh(ct, f"rm -f /run/systemd/system/{unit}.d/zz-test-hold.conf; systemctl daemon-reload",
       check=False)


def test_a_killed_scheduler_leaves_rotation_and_a_rerun_in_auto_restart_converges(ct):
    """SIGKILL to cpu0's scheduler under traffic through the router: SGLang takes its server
    down, the router takes it out of rotation, and a converge run while systemd holds the unit
    in auto-restart (a runtime drop-in holds it there) starts it again and waits for it."""
    unit, url = "sglang@cpu0.service", "http://127.0.0.1:30000"
    try:
        hold(ct, unit)
        with Client(ct, "kill") as client:
            killed = float(sh(ct, f"python3 -c 'import os, time; print(time.monotonic()); "
                                  f"os.kill(int(os.popen(\"pgrep -P {show(ct, unit, 'MainPID')} "
                                  f"-f sglang::schedul\").read().split()[0]), 9)'"))
            assert wait_until(lambda: show(ct, unit, "SubState") == "auto-restart", timeout=120)
            assert wait_until(lambda: left_at(client.read("watch"), url, killed),
                              timeout=LEAVE_BOUND_S + 30)
            result = play(ct, **ROUTER)
            exited = now(ct)
            assert result.rc == 0, str(result)
            # back in rotation, and requests sent after the run's end answered
            assert wait_until(lambda: back_at(client.read("watch"), url, exited) and sum(
                1 for sent, *_ in client.read("requests") if sent > exited) >= 20, timeout=300)
    finally:
        release(ct, unit)
    text = " ".join(result.output.split())
    assert re.search(r"cpu0 restarted: it had crashed \d+ s before this run \(killed by signal "
                     r"9\)", text), result.output[-4000:]
    assert "2/2 healthy" in result.output
    requests, watch = client.read("requests"), client.read("watch")
    own = own_health_at(ct, "cpu0", int(show(ct, unit, "InactiveExitTimestampMonotonic")) / 1e6)
    assert own is not None, "cpu0 never answered its own /health after its start"
    figures = {
        "left_rotation_s": round(left_at(watch, url, killed) - killed, 2),
        "back_after_own_health_s": round(back_at(watch, url, own) - own, 2),
        "failed_during": sum(1 for sent, done, ok, _ in requests if not ok and sent < exited),
        "failed_after_run": sum(1 for sent, done, ok, _ in requests if not ok and sent >= exited),
        **client.summary(),
    }
    FIGURES["killed_scheduler"] = figures
    # out by the router's own timers (back, above, once it answered its own /health: how soon
    # is a figure, as it adds a routed request, whose time the busy cores set)
    assert figures["left_rotation_s"] <= LEAVE_BOUND_S, figures
    assert figures["failed_after_run"] == 0, figures


VENV = "/opt/sglang/venv"  # inventory/lab/group_vars/all/paths.yml sglang_lxc_venv
# GET /metrics on a port of the container's loopback, parsed by prometheus_client (SGLang's own
# dependency, in the serving venv): the names of the metric families, as JSON
PARSE_METRICS = r"""
import json, sys, urllib.request
from prometheus_client.parser import text_string_to_metric_families
text = urllib.request.urlopen(f"http://127.0.0.1:{sys.argv[1]}/metrics", timeout=30).read()
print(json.dumps(sorted({f.name for f in text_string_to_metric_families(text.decode())})))
"""


# A client sending chat completions through the router, and a watcher of its /workers, from
# inside the container (the router binds loopback), for as long as the rolling restart runs. Each
# request is a line of /root/traffic.jsonl: [sent, answered (time.monotonic(), the clock of
# systemd's *TimestampMonotonic and of the journal's monotonic stamps), ok]; /root/traffic.first
# appears at the first answer; the summary is printed however the loop ends.
TRAFFIC = r"""
import json, os, sys, time, urllib.request
key, seconds = sys.argv[1], float(sys.argv[2])  # until /root/traffic.stop appears, at most that
body = json.dumps({"model": "tiny", "max_tokens": 4,
                   "messages": [{"role": "user", "content": "hello"}]}).encode()
sent, failed, polls, poll_errors, least, errors = 0, 0, 0, [], None, []
end = time.monotonic() + seconds
try:
    with open("/root/traffic.jsonl", "w", buffering=1) as log:
        while time.monotonic() < end and not os.path.exists("/root/traffic.stop"):
            request = urllib.request.Request(
                "http://127.0.0.1:30080/v1/chat/completions", data=body,
                headers={"Authorization": "Bearer " + key, "Content-Type": "application/json"})
            sent += 1
            began = time.monotonic()
            try:
                with urllib.request.urlopen(request, timeout=60) as answer:
                    answer.read()
                ok = True
            except Exception as error:  # any failure of the request: an HTTP error, a reset...
                ok = False
                failed += 1
                errors.append(type(error).__name__ + ": " + str(error)[:200])
            log.write(json.dumps([began, time.monotonic(), ok]) + "\n")
            if ok and not os.path.exists("/root/traffic.first"):
                open("/root/traffic.first", "w").close()
            try:  # the router's own count, for the figures; its failures are counted apart
                with urllib.request.urlopen("http://127.0.0.1:30080/workers", timeout=10) as w:
                    healthy = sum(1 for x in json.load(w)["workers"] if x.get("is_healthy"))
                polls += 1
                least = healthy if least is None else min(least, healthy)
            except Exception as error:
                poll_errors.append(type(error).__name__ + ": " + str(error)[:200])
            time.sleep(0.2)  # pace: the instances' restarts share the two cores with it
finally:
    print(json.dumps({"sent": sent, "failed": failed, "errors": errors[:5],
                      "worker_polls": polls, "least_healthy": least,
                      "worker_poll_errors": len(poll_errors),
                      "worker_poll_error_samples": poll_errors[:3]}), flush=True)
"""


def down_while(ct, name: str) -> tuple[float, float]:
    """(from, to) in seconds of CLOCK_MONOTONIC: the unit's last start began (its old process
    gone: the unit was inactive) to its new SGLang's "Load weight end" (its port opens only
    after that). Within it, only the other instance could answer; the rolling restart took this
    one out of the router before and put it back only once healthy, after it."""
    unit = f"sglang@{name}.service"
    began = int(show(ct, unit, "InactiveExitTimestampMonotonic")) / 1e6
    stamps = [float(m.group(1)) for m in re.finditer(
        r"^\[\s*([0-9.]+)\][^\n]*Load weight end",
        sh(ct, f"journalctl --no-pager -o short-monotonic -u {unit}"), re.M)]
    loaded = next((t for t in stamps if t > began), None)
    assert loaded is not None, f"{unit}: no 'Load weight end' after its restart at {began}"
    return began, loaded


def test_rolling_restart_under_traffic_through_the_router_fails_no_request(ct):
    before = invocations(ct)
    sh(ct, "rm -f /root/traffic.stop /root/traffic.first /root/traffic.jsonl; "
           f"cat > /root/traffic.py <<'EOF'\n{TRAFFIC}\nEOF")
    outcome: dict = {}
    client = threading.Thread(target=lambda: outcome.update(traffic=ct.exec(
        "/usr/bin/python3", "/root/traffic.py", KEY, "1500", check=False)))

    def answered() -> bool:
        return sh(ct, "test -e /root/traffic.first && echo yes", check=False) == "yes\n"

    started = time.monotonic()
    client.start()
    try:
        # the restart begins once the client has had its first answer through the router
        wait_until(lambda: not client.is_alive() or answered(), timeout=600, step=0.5)
        assert answered(), str(outcome.get("traffic", "the client has had no answer yet"))
        result = play(ct, playbook=ROLLING, **ROUTER)
        FIGURES["rolling_restart_seconds"] = round(time.monotonic() - started, 1)
    finally:
        ct.exec("touch", "/root/traffic.stop", check=False)  # ends its loop
        client.join(timeout=120)
    assert result.rc == 0, str(result)
    after = invocations(ct)
    assert all(after[n] != before[n] for n in before)
    order = [m.group(1) for m in
             re.finditer(r"Rolling \| Restart (sglang@cpu\d\.service)", result.output)]
    assert order == ["sglang@cpu0.service", "sglang@cpu1.service"]
    assert result.output.count("1/1 healthy") >= 2  # each waits for its instance
    proc = outcome["traffic"]
    lines = proc.stdout.strip().splitlines()
    assert lines, proc.stderr
    traffic = json.loads(lines[-1])
    requests = [json.loads(line) for line in sh(ct, "cat /root/traffic.jsonl").splitlines()]
    # requests sent and answered while each instance in turn was down: the traffic went on
    answered_while_down = {}
    for name in NAMES:
        began, loaded = down_while(ct, name)
        answered_while_down[name] = sum(1 for sent, done, ok in requests
                                        if ok and began <= sent and done <= loaded)
    FIGURES["rolling_restart_traffic"] = {**traffic, "answered_while_down": answered_while_down}
    assert traffic["failed"] == 0, traffic
    assert all(answered_while_down.values()), answered_while_down


# The failure drills come after the router's tests, with the router kept in front (ROUTER in each
# play): cpu1 is restarted for them and then removed, so the reboot brings back cpu0 and the router
# alone, and no instance is started only to stand in the router's worker list again.
def test_changing_one_instance_restarts_only_it_and_its_stopped_load_is_reported_hung(ct):
    """A changed argument of cpu1 restarts cpu1 alone (cpu0's invocation and process stay); then
    SIGSTOP freezes cpu1's processes just after its restart: no log line, byte or page moves
    again, and readiness calls it hung once the stall timeout has passed. (One start for both:
    the change's own start is the one frozen.)"""
    stall = 10  # a pure wait: readiness polls each second, and nothing of cpu1 moves any more
    unit = "sglang@cpu1.service"
    before = invocations(ct)
    pids = main_pids(ct)
    outcome: dict = {}
    thread = threading.Thread(target=lambda: outcome.update(result=play(
        ct, sglang_serve_stall_timeout=stall, **ROUTER,
        sglang_serve_instances=instances(cpu1={"extra_args": ["--max-total-tokens", "2048"]}))))
    thread.start()
    # a play that ends before it restarted cpu1 (an error, or the host unreachable) fails here
    # at once, with its output, instead of after the whole wait
    restarted = wait_until(lambda: not thread.is_alive()
                           or (show(ct, unit, "InvocationID") not in ("", before["cpu1"])
                               and show(ct, unit, "MainPID") != "0"), timeout=600, step=1)
    assert restarted and thread.is_alive(), str(outcome.get("result", "the play still runs"))
    sh(ct, f"systemctl kill -s SIGSTOP {unit}")
    thread.join(timeout=900)
    result = outcome["result"]
    assert result.rc != 0, str(result)
    # the verdict counts the stall from the last progress readiness saw: the whole timeout
    hung = re.search(rf"{re.escape(unit)} hung: alive but no progress for (\d+)s", result.output)
    assert hung and int(hung.group(1)) >= stall, str(result)
    assert "1/2 healthy" in result.output
    assert show(ct, "sglang@cpu0.service", "ActiveState") == "active"
    # only the changed instance was restarted, with its new argument
    assert invocations(ct)["cpu0"] == before["cpu0"] and main_pids(ct)["cpu0"] == pids["cpu0"]
    assert "--max-total-tokens\n2048" in sh(ct, "cat /etc/sglang/instances/cpu1.args")


def test_a_truncated_shard_is_reported_crashed_with_sglangs_traceback(ct):
    """cpu1 on a model whose shard is cut: SGLang's loader fails, the unit crashes. It is held in
    auto-restart (the removal, next, stops it), not restarted every 2 s to fail again: each try
    imports torch and SGLang again, on the cores the other tests share."""
    hold(ct, "sglang@cpu1.service")
    result = play(ct, **ROUTER, sglang_serve_instances=instances(cpu1={"model_path": BROKEN}))
    assert result.rc != 0, str(result)
    assert "sglang@cpu1.service crashed" in result.output, str(result)
    assert " hung" not in result.output
    tail = result.output.split("log lines of sglang@cpu1.service", 1)[1]
    # SGLang's loader, reading the cut shard through safetensors, in the unit's own log tail
    assert re.search(r"safetensors|SafetensorError|MetadataIncompleteBuffer", tail), tail[:4000]
    assert "Traceback" in sh(ct, "journalctl --no-pager -o cat -u sglang@cpu1.service")


def test_removed_instance_is_stopped_and_disabled(ct):
    """cpu1 (crashed, held in auto-restart) leaves. (A TP group cannot run here: SGLang
    0.5.12's CPU engine builds a PyNcclCommunicator for tp 2 and fails "Expected a cuda device,
    but got: cpu"; tests/unit/serve covers its --tp and CUDA_VISIBLE_DEVICES.)"""
    try:
        result = play(ct, **ROUTER, sglang_serve_instances=ONE)
    finally:
        release(ct, "sglang@cpu1.service")  # the truncated shard's drill held it
    assert result.rc == 0, str(result)
    assert show(ct, "sglang@cpu1.service", "ActiveState") == "inactive"
    assert show(ct, "sglang@cpu1.service", "UnitFileState") != "enabled"
    assert sh(ct, "ls /etc/sglang/instances").split() == ["cpu0.args", "cpu0.env", "cpu0.yaml"]
    assert "1/1 healthy" in result.output
    # the router in front now routes to cpu0 alone
    assert "is ready: 1/1 workers healthy" in " ".join(result.output.split())
    workers = json.loads(sh(ct, "curl -s http://127.0.0.1:30080/workers"))
    assert [w["url"] for w in workers["workers"]] == ["http://127.0.0.1:30000"], workers


def test_every_instance_stopped_then_a_converge_leaves_no_failed_request(ct):
    """Every instance of the host (cpu0, after the removal) stopped under traffic through the
    router, its breaker opened by the failures; then the serve play: it exits 0 only once a
    completion went through the router, and no request sent after that fails (sglang-router's
    own defaults answered 503 for 14-17 s after such a run: breakers open for 60 s)."""
    url = "http://127.0.0.1:30000"
    with Client(ct, "down") as client:
        stopped = now(ct)
        sh(ct, "systemctl stop sglang@cpu0.service")
        # the outage as a client meets it: the router takes cpu0 out, requests fail
        assert wait_until(lambda: left_at(client.read("watch"), url, stopped) and sum(
            1 for sent, done, ok, _ in client.read("requests") if sent > stopped and not ok) >= 10,
            timeout=120)
        started = time.monotonic()
        result = play(ct, **ROUTER, sglang_serve_instances=ONE)
        FIGURES["converge_after_outage_seconds"] = round(time.monotonic() - started, 1)
        exited = now(ct)
        assert result.rc == 0, str(result)
        assert wait_until(lambda: sum(1 for sent, *_ in client.read("requests")
                                      if sent > exited) >= 30, timeout=300)
    assert re.search(r"is ready: 1/1 workers healthy; a completion through the router in",
                     " ".join(result.output.split())), result.output[-4000:]
    requests, watch = client.read("requests"), client.read("watch")
    # its new start's first /health 200 (the stopping process may still answer one after
    # `stopped`: under load its graceful stop takes seconds)
    started_again = int(show(ct, "sglang@cpu0.service", "InactiveExitTimestampMonotonic")) / 1e6
    own = own_health_at(ct, "cpu0", started_again)
    assert own is not None, "cpu0 never answered its own /health after its start"
    back = back_at(watch, url, own)
    figures = {
        "left_rotation_s": round(left_at(watch, url, stopped) - stopped, 2),
        "back_after_own_health_s": round(back - own, 2) if back else None,
        "failed_during": sum(1 for sent, done, ok, _ in requests
                             if not ok and stopped <= sent < exited),
        "failed_after_run": sum(1 for sent, done, ok, _ in requests if not ok and sent >= exited),
        "sent_after_run": sum(1 for sent, *_ in requests if sent >= exited),
        **client.summary(),
    }
    FIGURES["all_stopped"] = figures
    assert figures["failed_after_run"] == 0, figures
    # out by the router's own timers, counted from the moment the stopped server stopped
    # answering: under load SGLang's graceful stop takes seconds after `stopped`
    gone = int(show(ct, "sglang@cpu0.service", "InactiveEnterTimestampMonotonic")) / 1e6
    assert left_at(watch, url, stopped) - max(stopped, gone) <= LEAVE_BOUND_S, (gone, figures)
    assert back is not None, figures


def init_started(ct) -> str:
    """When the container's PID 1 started (clock ticks since the host's boot, /proc/1/stat's
    22nd field), or "" while the container does not answer. A reboot starts a new PID 1. (The
    kernel's boot_id is the host's: the same across a container's reboot.)"""
    done = ct.exec("sh", "-c", "sed 's/^.*) //' /proc/1/stat | cut -d' ' -f20", check=False)
    return done.stdout.strip() if done.returncode == 0 else ""


def test_reboot_brings_every_instance_and_the_router_back_healthy(ct):
    """Every instance the host has after the removal (cpu0) and the router."""
    pids = {**main_pids(ct, ["cpu0"]), "router": show(ct, "sglang-router.service", "MainPID")}
    init = init_started(ct)
    assert init
    ct.exec("systemctl", "reboot", check=False)
    # the container is back with a new PID 1 (the old one's sshd is gone), then sshd listens
    assert wait_until(lambda: init_started(ct) not in ("", init), timeout=600, step=1)
    wait_for_ssh(ct.ip)
    started = time.monotonic()
    result = play(ct, **ROUTER, sglang_serve_instances=ONE)
    FIGURES["after_reboot_seconds"] = round(time.monotonic() - started, 1)
    assert result.rc == 0, str(result)
    assert result.changed == 0, str(result)
    assert "1/1 healthy" in result.output
    assert "is ready: 1/1 workers healthy" in " ".join(result.output.split())
    after = {**main_pids(ct, ["cpu0"]), "router": show(ct, "sglang-router.service", "MainPID")}
    assert all(after[n] not in ("0", pids[n]) for n in pids), (pids, after)
    assert show(ct, "sglang@cpu1.service", "ActiveState") == "inactive"  # removed stays removed


def test_api_key_appears_in_no_output_and_on_no_command_line(ct):
    assert OUTPUTS
    for output in OUTPUTS:
        assert KEY not in output
    # SGLang 0.5.12 logs its whole ServerArgs at every start, api_key included; the role's
    # launcher masks it (roles/sglang_serve/files/sglang-launch.py): SGLang's own line is there,
    # with the key masked, and no line of any instance or of the router holds the key
    journal = sh(ct, "journalctl --no-pager -q -o cat -u 'sglang@*' -u sglang-router")
    leaking = [line.replace(KEY, "<the key>")[:300] for line in journal.splitlines()
               if KEY in line]
    assert leaking == [], leaking
    assert "api_key='<redacted>'" in journal
    assert KEY not in sh(ct, "cat /etc/sglang/instances/cpu0.args")
    assert KEY in sh(ct, "cat /etc/sglang/instances/cpu0.yaml")  # only in its 0640 --config file
    assert sh(ct, "stat -c '%a %U %G' /etc/sglang/instances/cpu0.yaml").split() == [
        "640",
        "root",
        "sglang",
    ]
    # no process's command line holds it (the scan reads the key from the files, not from its
    # own command line): SGLang read it from --config
    scan = json.loads(ct.exec("python3", "-c", CMDLINE_SCAN).stdout)
    assert scan["keys"] == 1 and scan["processes"] >= 7 and scan["holding"] == [], scan
    assert http(ct, 30000, "/v1/models", KEY) == "200"
    print("serve figures:", json.dumps(FIGURES))
