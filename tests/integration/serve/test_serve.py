"""sglang_serve on a real lab container, with the stand-in server in place of SGLang.

One container (vmid 250) goes through the whole story in order: bad input rejected before any
change, check mode, converge with progress reports, idempotence, one-instance changes, removal,
a killed process, hang and crash detection, reboot, rolling restart and the router.
"""

from __future__ import annotations

import json
import re
import socket
import time

import pytest

from tests.infra.cmdline_scan import CMDLINE_SCAN
from tests.lablib import REPO, ansible_playbook, pct

pytestmark = pytest.mark.lab

VMID = 250
STANDIN_DIR = "/opt/sglang-standin"
KEY = "sk-test-7f3a9c1e5b"  # must never appear in any output
SERVE = "playbooks/serve.yml"
ROLLING = "playbooks/rolling_restart.yml"
BASE = {
    "sglang_serve_enabled": True,
    "sglang_serve_gpu_count": 4,
    "sglang_serve_gpus": [0, 1, 2],
    "sglang_serve_model_path": "standin-model",
    "sglang_serve_served_model_name": "standin",
    "sglang_serve_launch_command": ["/usr/bin/python3", f"{STANDIN_DIR}/sglang_server.py"],
    "sglang_serve_env": {
        "SGLANG_STANDIN_LOAD_SECONDS": "12",  # > restart-to-first-poll gap, loaded box (~8 s)
        "SGLANG_STANDIN_WARMUP_SECONDS": "1",
    },
    "sglang_serve_api_key": KEY,
    "sglang_serve_report_interval": 2,
    "sglang_serve_stall_timeout": 10,
    "sglang_serve_ready_timeout": 90,
    "sglang_serve_restart_sec": 1,
    # no SGLang in this container (the stand-in serves): SGLang's own parser checks the arguments
    # in tests/integration/jit, where the serving venv holds it
    "sglang_serve_args_check": False,
}
EXPLICIT = [
    {"name": "gpu0", "gpus": [0]},
    {"name": "gpu1", "gpus": [1]},
    {"name": "gpu2", "gpus": [2]},
]
OUTPUTS: list[str] = []


# systemd-analyze security: the hardened units score 3.1 ("OK"); a regression fails here.
EXPOSURE_FLOOR = 3.5
_EXPOSURE = re.compile(r"Overall exposure level for (\S+): ([0-9.]+)")


def exposures(text: str) -> dict[str, float]:
    """Exposure level per unit from `systemd-analyze security` lines in ``text``."""
    return {m.group(1): float(m.group(2)) for m in _EXPOSURE.finditer(text)}


def variables(**changes):
    return {**BASE, **changes}


@pytest.fixture(scope="module")
def ct(lab_container):
    container = lab_container(VMID)
    container.exec("mkdir", "-p", STANDIN_DIR)
    pct(
        "push",
        str(VMID),
        str(REPO / "tests/standins/sglang_server.py"),
        f"{STANDIN_DIR}/sglang_server.py",
        "--perms",
        "0755",
    )
    return container


def play(ct, playbook=SERVE, check=False, args=None, **changes):
    result = ct.run_playbook(playbook, extra_vars=variables(**changes), check=check, args=args)
    OUTPUTS.append(result.output)
    (ct.workdir / f"play-{len(OUTPUTS):02d}.log").write_text(result.output)
    return result


def sh(ct, command: str, check: bool = True) -> str:
    return ct.exec("sh", "-c", command, check=check).stdout


def show(ct, unit: str, prop: str) -> str:
    return sh(ct, f"systemctl show -p {prop} --value {unit}").strip()


def invocations(ct, names=("gpu0", "gpu1", "gpu2")) -> dict[str, str]:
    return {n: show(ct, f"sglang@{n}.service", "InvocationID") for n in names}


def unit_installed(ct) -> bool:
    return sh(ct, "test -e /etc/systemd/system/sglang@.service && echo yes", check=False) == "yes\n"


def http(ct, port: int, path: str, key: str | None = None) -> str:
    header = f"-H 'Authorization: Bearer {key}'" if key else ""
    return sh(
        ct,
        f"curl -s -o /dev/null -w '%{{http_code}}' {header} http://127.0.0.1:{port}{path}",
        check=False,
    )


def test_lab_without_gpu_skips_serving(ct):
    result = ct.run_playbook(SERVE)  # the lab inventory alone: sglang_lxc_gpus_expected 0
    OUTPUTS.append(result.output)
    assert result.rc == 0, str(result)
    assert "Skipping SGLang serving on ct250: no GPU" in result.output
    assert not unit_installed(ct)
    # the only changes are the records of the skips (their folder, serve, router), which
    # tests/infra reads
    changed_tasks = re.findall(r"TASK \[([^\]]+)\] \*+\nchanged:", result.output)
    assert changed_tasks, result.output
    assert all(t.startswith("sglang_lxc.serving.deploy_record :")
               for t in changed_tasks), changed_tasks
    record = json.loads(sh(ct, "cat /etc/sglang/deployed/sglang_serve.json"))
    assert (record["status"], record["reason"]) == ("skipped", "no GPU"), record
    again = ct.run_playbook(SERVE)
    assert again.rc == 0, str(again)
    assert again.changed == 0, str(again)


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        (
            {
                "sglang_serve_instances": [
                    {"name": "a", "gpus": [0], "port": 31000},
                    {"name": "b", "gpus": [1], "port": 31000},
                ]
            },
            ["both use port 31000"],
        ),
        (
            {"sglang_serve_instances": [{"name": "a", "gpus": [0, 1]}, {"name": "b", "gpus": [1]}]},
            ["GPU 1 is given to both a and b"],
        ),
        ({"sglang_serve_gpus": [7]}, ["GPU index 7", "sglang_serve_gpu_count = 4"]),
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
    ids=["port-twice", "gpu-twice", "unknown-gpu", "mem-fraction", "eagle3-half", "open-no-key"],
)
def test_bad_input_rejected_before_any_change(ct, changes, words):
    result = play(ct, **changes)
    assert result.rc != 0, str(result)
    assert result.changed == 0, str(result)
    for word in words:
        assert word in result.output, str(result)
    assert not unit_installed(ct)


def test_check_mode_on_a_fresh_host_changes_nothing(ct):
    result = play(ct, check=True)
    assert result.rc == 0, str(result)
    assert not unit_installed(ct)


def test_converge_reports_loading_then_healthy(ct):
    result = play(ct)
    assert result.rc == 0, str(result)
    assert result.changed > 0
    # no weight files in the stand-in's model folder: progress from its SGLang-like shard lines
    # (ansible's output folds long lines: any whitespace)
    assert re.search(r"sglang@gpu\d\.service\s+\(GPU\s+\d,\s+port\s+3000\d\):\s+loading\s+"
                     r"(\d+%\s+\(shards\s+\d/8\)\s+)?for", result.output), result.output[-3000:]
    assert "3/3 healthy" in result.output
    assert re.search(r"INSTANCE\s+GPU\s+PORT\s+MEMORY\s+HTTP\s+STATE", result.output)
    levels = exposures(result.output)
    assert {f"sglang@gpu{i}.service" for i in range(3)} <= set(levels), levels
    for unit, level in levels.items():
        assert level <= EXPOSURE_FLOOR, f"{unit}: systemd-analyze security exposure {level}"


def test_instances_have_their_ports_and_environment(ct):
    for gpu in range(3):
        port = 30000 + gpu
        assert http(ct, port, "/health") == "200"
        assert http(ct, port, "/v1/models") == "401"
        assert http(ct, port, "/v1/models", KEY) == "200"
        pid = show(ct, f"sglang@gpu{gpu}.service", "MainPID")
        environ = sh(ct, f"tr '\\0' '\\n' < /proc/{pid}/environ")
        assert f"CUDA_VISIBLE_DEVICES={gpu}\n" in environ
        assert "HF_HUB_OFFLINE=1\n" in environ
        assert show(ct, f"sglang@gpu{gpu}.service", "User") == "sglang"
    assert "nvidia1 rw" in sh(ct, "systemctl cat sglang@gpu1.service")
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


def test_rerun_changes_nothing_and_publishes_the_verdict(ct):
    result = ansible_playbook(
        SERVE,
        ct.inventory,
        extra_vars=variables(),
        args=["--limit", ct.name, "-v"],
        env={"ANSIBLE_SHOW_CUSTOM_STATS": "1"},
    )
    OUTPUTS.append(result.output)
    assert result.rc == 0, str(result)
    assert result.changed == 0, str(result)
    stats = result.output.split("CUSTOM STATS", 1)[1]
    assert re.search(r"todo_details.*ct250.*3/3 healthy", stats, re.S), stats


def test_check_mode_after_converge_changes_nothing(ct):
    result = play(ct, check=True)
    assert result.rc == 0, str(result)
    assert result.changed == 0, str(result)


def test_explicit_instances_equal_to_per_gpu_change_nothing(ct):
    result = play(ct, sglang_serve_instances=EXPLICIT)
    assert result.rc == 0, str(result)
    assert result.changed == 0, str(result)


def test_changing_one_instance_restarts_only_it(ct):
    before = invocations(ct)
    changed = [EXPLICIT[0], {**EXPLICIT[1], "mem_fraction_static": 0.5}, EXPLICIT[2]]
    result = play(ct, sglang_serve_instances=changed)
    assert result.rc == 0, str(result)
    after = invocations(ct)
    assert after["gpu1"] != before["gpu1"]
    assert after["gpu0"] == before["gpu0"]
    assert after["gpu2"] == before["gpu2"]
    assert "--mem-fraction-static\n0.5" in sh(ct, "cat /etc/sglang/instances/gpu1.args")


def test_removed_instance_is_stopped_and_disabled_and_tp_group_added(ct):
    tp = {"name": "tp2", "gpus": [2, 3]}
    result = play(ct, sglang_serve_instances=[EXPLICIT[0], EXPLICIT[1], tp])
    assert result.rc == 0, str(result)
    assert show(ct, "sglang@gpu2.service", "ActiveState") == "inactive"
    assert show(ct, "sglang@gpu2.service", "UnitFileState") != "enabled"
    assert sh(ct, "ls /etc/sglang/instances").split() == [
        "gpu0.args",
        "gpu0.env",
        "gpu0.yaml",
        "gpu1.args",
        "gpu1.env",
        "gpu1.yaml",
        "tp2.args",
        "tp2.env",
        "tp2.yaml",
    ]
    assert 'CUDA_VISIBLE_DEVICES="2,3"' in sh(ct, "cat /etc/sglang/instances/tp2.env")
    assert "--tp\n2\n" in sh(ct, "cat /etc/sglang/instances/tp2.args")
    assert http(ct, 30002, "/health") == "200"  # tp2 takes the port base + its first GPU
    # back to the three per-GPU instances for the rest of the module
    result = play(ct)
    assert result.rc == 0, str(result)
    assert show(ct, "sglang@tp2.service", "ActiveState") == "inactive"


def test_killed_instance_is_restarted_by_systemd(ct):
    unit = "sglang@gpu0.service"
    restarts = int(show(ct, unit, "NRestarts"))
    sh(ct, f"kill -9 {show(ct, unit, 'MainPID')}")
    deadline = time.time() + 30
    while time.time() < deadline:
        if int(show(ct, unit, "NRestarts")) > restarts and http(ct, 30000, "/health") == "200":
            break
        time.sleep(1)
    assert int(show(ct, unit, "NRestarts")) == restarts + 1
    assert http(ct, 30000, "/health") == "200"


def test_hang_fails_after_the_stall_timeout(ct):
    hang = [EXPLICIT[0], {**EXPLICIT[1], "env": {"SGLANG_STANDIN_MODE": "hang"}}, EXPLICIT[2]]
    started = time.time()
    result = play(ct, sglang_serve_instances=hang)
    assert result.rc != 0, str(result)
    assert "sglang@gpu1.service hung: alive but no progress for" in result.output, str(result)
    assert "2/3 healthy" in result.output
    assert "Loading safetensors checkpoint shards: 50%" in result.output  # log tail
    assert time.time() - started >= BASE["sglang_serve_stall_timeout"]


def test_crash_fails_fast_with_the_log_tail(ct):
    crash = [EXPLICIT[0], {**EXPLICIT[1], "env": {"SGLANG_STANDIN_MODE": "crash"}}, EXPLICIT[2]]
    result = play(ct, sglang_serve_instances=crash)
    assert result.rc != 0, str(result)
    assert "sglang@gpu1.service crashed" in result.output, str(result)
    assert "CUDA out of memory" in result.output
    assert " hung" not in result.output
    # back to healthy: the crash-looping instance's start limit is cleared
    result = play(ct)
    assert result.rc == 0, str(result)
    assert "3/3 healthy" in result.output


def wait_for_ssh(ip: str, timeout: float = 120) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        try:
            with socket.create_connection((ip, 22), timeout=2):
                return
        except OSError:
            time.sleep(2)
    raise AssertionError(f"{ip}:22 did not come back")


def test_reboot_brings_every_instance_back_healthy(ct):
    pid_before = show(ct, "sglang@gpu0.service", "MainPID")
    ct.exec("systemctl", "reboot", check=False)
    time.sleep(5)
    wait_for_ssh(ct.ip)
    result = play(ct)
    assert result.rc == 0, str(result)
    assert result.changed == 0, str(result)
    assert "3/3 healthy" in result.output
    assert show(ct, "sglang@gpu0.service", "MainPID") not in ("0", pid_before)


def test_rolling_restart_one_at_a_time(ct):
    before = invocations(ct)
    result = play(ct, playbook=ROLLING)
    assert result.rc == 0, str(result)
    after = invocations(ct)
    assert all(after[n] != before[n] for n in before)
    order = [
        m.group(1)
        for m in re.finditer(r"Rolling \| Restart (sglang@gpu\d\.service)", result.output)
    ]
    assert order == ["sglang@gpu0.service", "sglang@gpu1.service", "sglang@gpu2.service"]
    # each restart waits for its instance before the next one starts
    assert result.output.count("1/1 healthy") >= 3
    assert "3/3 healthy" in result.output


def test_router_in_front(ct):
    result = play(
        ct,
        sglang_router_enabled=True,
        sglang_router_launch_command=["/usr/bin/python3", f"{STANDIN_DIR}/sglang_server.py"],
        sglang_router_policy="round_robin",
    )
    assert result.rc == 0, str(result)
    assert "is ready: 3/3 workers healthy" in " ".join(result.output.split())
    assert http(ct, 30080, "/readiness") == "200"
    unit = sh(ct, "systemctl cat sglang-router.service")
    assert "--policy round_robin" in unit
    security = sh(ct, "systemd-analyze security --no-pager sglang-router.service")
    level = exposures(security)["sglang-router.service"]
    assert level <= EXPOSURE_FLOOR, f"sglang-router.service exposure {level}"
    assert "http://127.0.0.1:30002" in unit


def test_api_key_appears_in_no_output(ct):
    assert OUTPUTS
    for output in OUTPUTS:
        assert KEY not in output
    assert KEY not in sh(ct, "journalctl --no-pager -q -o cat -u 'sglang@*'")
    assert KEY not in sh(ct, "cat /etc/sglang/instances/gpu0.args")
    assert KEY in sh(ct, "cat /etc/sglang/instances/gpu0.yaml")  # only in its 0640 --config file
    assert sh(ct, "stat -c '%a %U %G' /etc/sglang/instances/gpu0.yaml").split() == [
        "640",
        "root",
        "sglang",
    ]
    # no process's command line holds it (the scan reads the key from the files, not from its
    # own command line): the server read it from --config
    scan = json.loads(ct.exec("python3", "-c", CMDLINE_SCAN).stdout)
    assert scan["keys"] == 1 and scan["processes"] >= 5 and scan["holding"] == [], scan
    assert http(ct, 30000, "/v1/models", KEY) == "200"
