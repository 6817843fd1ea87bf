"""The validate play (playbooks/validate.yml) on inventory/example, its node read recorded.

kpro6's read is what node_state.sh prints there: the node's cores, memory, GPUs, bridge and
templates as inventory/example describes the node (kpro6 is the example's own), and the ``## fit``
section node_state.sh gets from node_fit.py on a recorded node: the NVML answers, /proc, /sys and
lspci of a public 8x RTX PRO 6000 Blackwell Server box (tests/unit/gpu/recordings/
rtx_pro_6000_x8_asus_*.json, sources in their _about). The read is handed to the play as
kpro6's ``__validate_node_state`` (an extra var: it wins over what the play's raw task would
register), and the play runs limited to ct200, so nothing connects anywhere. Two plays, about
2 s each.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_containers import (
    parse_node_state,
)

from tests.loaders import ROOT, load_file

recorded_node = load_file("recorded_node", ROOT / "tests/standins/recorded_node.py")

VENV_BIN = Path(sys.executable).parent
RECORDINGS = ROOT / "tests/unit/gpu/recordings"
TABLE = yaml.safe_load((ROOT / "roles/sglang_serve/files/sm120_refusals.yml").read_text())
# kpro6 as inventory/example describes it (host_vars/kpro6.yml): room for ct200's 64 cores and
# 480 GiB, its eight GPUs, vmbr0 on 192.0.2.0/24, the template it names; no container yet
KPRO6 = ("## nproc\n128\n## meminfo\nMemTotal:       1056964608 kB\n## gpus\n"
         + "".join(f"nvidia{i}\n" for i in range(8))
         + "## addresses\n5: vmbr0    inet 192.0.2.10/24 scope global vmbr0\n"
         + "## templates\ndebian-12-standard_12.12-1_amd64.tar.zst\n")


def node_state(recording: Path, tmp_path: Path) -> str:
    """kpro6's read: node_state.sh's fit section (node_fit.py on the recorded node), after the
    example's node itself."""
    root = recorded_node.materialise(recording, tmp_path / "node")
    configs = tmp_path / "configs"  # /etc/pve/lxc: no container yet
    configs.mkdir()
    proc = subprocess.run(
        ["bash", str(ROOT / "playbooks/files/node_state.sh"), "/bin/false", str(tmp_path),
         str(configs), sys.executable, (ROOT / "playbooks/files/node_fit.py").read_text(),
         (ROOT / "plugins/module_utils/sglang_load_progress.py").read_text(),
         "/tank/models/Kimi-K2.5"],
        capture_output=True, text=True, env=recorded_node.env(recording, root), check=False,
        timeout=60)
    assert proc.returncode == 0, proc.stderr[-2000:]
    fit = parse_node_state(proc.stdout)["fit"]
    return KPRO6 + "## fit\n" + "\n".join(fit) + "\n"


def validate(tmp_path: Path, recording: str, playbook: str = "playbooks/validate.yml",
             **extra) -> tuple[subprocess.CompletedProcess, str]:
    """(the play's run, the checklist it wrote)."""
    state = node_state(RECORDINGS / f"{recording}.json", tmp_path)
    extra_vars = {"__validate_node_state": {"stdout": state, "rc": 0, "changed": False},
                  "proxmox_lxc_ssh_public_key": "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIE test",
                  **extra}
    env = {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"), "ANSIBLE_NOCOLOR": "1",
           "SGLANG_LXC_ARTIFACTS": str(tmp_path / "artifacts"),
           "PATH": os.pathsep.join([str(VENV_BIN), os.environ.get("PATH", "")])}
    proc = subprocess.run(
        [str(VENV_BIN / "ansible-playbook"), "-i", "inventory/example", playbook,
         "--limit", "ct200", "-e", json.dumps(extra_vars)],
        cwd=ROOT, env=env, capture_output=True, text=True, timeout=300, check=False)
    todo = tmp_path / "artifacts/latest/todo.md"
    return proc, todo.read_text() if todo.exists() else ""


def test_inventory_example_as_shipped_passes_and_reports_the_fabric_verdict(tmp_path):
    proc, todo = validate(tmp_path, "rtx_pro_6000_x8_asus_p2p_ok")
    assert proc.returncode == 0, proc.stdout[-4000:]
    assert ("ct200: kimi-tp8: 8 GPUs, P2P read/write OK, PIX/NODE/SYS, IOMMU off, "
            "ACS redirect off") in todo
    assert "SM120" not in proc.stdout


def test_every_refusal_row_and_the_acs_verdict_on_inventory_example(tmp_path):
    """sglang_serve_attention_backend: fa3 for the example, and every other row of the table on
    four two-GPU instances of it, on the ACS-on box: each refused with its cited reason; each
    group's fabric verdict names the fix."""
    instances = [
        {"name": "kimi-a", "gpus": [0, 1],
         "extra_args": ["--moe-runner-backend", "deep_gemm", "--fp8-gemm-backend",
                        "flashinfer_trtllm"],
         "env": {"SGLANG_ENABLE_JIT_DEEPGEMM": "1"}},
        {"name": "kimi-b", "gpus": [2, 3], "attention_backend": "flashmla",
         "extra_args": ["--moe-runner-backend=flashinfer_trtllm", "--fp8-gemm-backend=deep_gemm"],
         "env": {"SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE": "true"}},
        {"name": "kimi-c", "gpus": [4, 5], "attention_backend": "trtllm_mha",
         "extra_args": ["--moe-runner-backend", "flashinfer_trtllm_routed"]},
        {"name": "kimi-d", "gpus": [6, 7], "attention_backend": "trtllm_mla",
         "extra_args": ["--moe-runner-backend", "flashinfer_mxfp4"]},
    ]
    proc, _todo = validate(tmp_path, "rtx_pro_6000_x8_asus_acs_on",
                           sglang_serve_attention_backend="fa3",
                           sglang_serve_instances=instances)
    out = proc.stdout
    assert proc.returncode != 0
    assert f"({len(TABLE['refusals'])} problem(s); nothing was changed)" in out
    assert ("ct200: sglang_serve_attention_backend = 'fa3': instance kimi-a on kpro6 (GPUs of "
            "compute capability 12.0, SM120) would run --attention-backend fa3 as the prefill "
            "and decode backend") in out
    message = out.split("msg: |-", 1)[1].split("(12 problem(s)", 1)[0]
    lines = [" ".join(line.split()) for line in message.split("\n        ct200: ")]
    for row in TABLE["refusals"]:
        why = " ".join(str(row["why"]).split())
        assert sum(why in line for line in lines) >= 1, (row["id"], lines)
    for name in ("kimi-a", "kimi-b", "kimi-c", "kimi-d"):
        assert f"ct200: {name}: 2 GPUs, P2P read/write OK, PIX, IOMMU off, ACS redirect on 2 " \
               "bridge(s)" in out


def test_the_nccl_environment_the_fabric_calls_for_reaches_the_serve_play(tmp_path):
    """The ACS-on box as shipped: a warning, not a refusal, and the TP-8 group's NCCL
    environment is what serve.yml hands the role as sglang_serve_fabric_env (its own expression,
    read from serve.yml, evaluated in a play after the validate play of the same run)."""
    serve = yaml.safe_load((ROOT / "playbooks/serve.yml").read_text())
    expression = serve[0]["roles"][0]["vars"]["sglang_serve_fabric_env"]
    playbook = tmp_path / "validate_then_serve_vars.yml"
    playbook.write_text(yaml.safe_dump([
        {"ansible.builtin.import_playbook": str(ROOT / "playbooks/validate.yml")},
        {"name": "What the serve play would pass", "hosts": "sglang_servers",
         "gather_facts": False,
         "tasks": [{"name": "Show sglang_serve_fabric_env", "ansible.builtin.debug": {
             "msg": "FABRIC_ENV=" + expression.replace("{{", "{{ (").replace(
                 "}}", ") | to_json }}")}}]},
    ]))
    proc, _todo = validate(tmp_path, "rtx_pro_6000_x8_asus_acs_on", playbook=str(playbook))
    assert proc.returncode == 0, proc.stdout[-4000:]
    shown, _end = json.JSONDecoder().raw_decode(proc.stdout.split("FABRIC_ENV=", 1)[1])
    assert shown == {"kimi-tp8": {"NCCL_P2P_DISABLE": "1"}}
