"""The SM120 refusals (plugins/plugin_utils/validate_sm120.py, the table
roles/sglang_serve/files/sm120_refusals.yml): each row refused on GPUs of compute capability 12.x
through the variable that sets it, nothing refused elsewhere, what the table leaves allowed left
allowed. The GPUs' compute capability comes from node_fit.py's NVML read (the recorded answers of
8x RTX PRO 6000 Blackwell, 12.0, and of an H200, 9.0); the instances from the sglang_serve filter.
The citations themselves are checked against the locked wheels in test_sm120_citations.py.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
import yaml
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_fit import parse_fit
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_serving import (
    serve_problems,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_sm120 import (
    flag_value,
    instance_refusals,
    load_table,
    sm120_problems,
)

from tests.example_kimi import CT, SERVE
from tests.loaders import ROOT, load_file

RECORDINGS = ROOT / "tests/unit/gpu/recordings"
NODE_FIT = ROOT / "playbooks/files/node_fit.py"
READER = ROOT / "plugins/module_utils/sglang_load_progress.py"
TABLE = load_table()


def node_read(recording: str) -> dict:
    """node_fit.py as node_state.sh runs it, with the recorded NVML answers as pynvml."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests/standins/pynvml_recorded"),
           "FAKE_PYNVML_RECORDING": str(RECORDINGS / f"{recording}.json"),
           "SGLANG_LXC_NODE_ROOT": "/nonexistent-node-root"}
    out = subprocess.run([sys.executable, "-c", NODE_FIT.read_text(), READER.read_text()],
                         capture_output=True, text=True, env=env, check=True, timeout=60).stdout
    return parse_fit(out.splitlines())


@pytest.fixture(scope="module")
def sm120():
    return node_read("rtx_pro_6000_x8_training")


@pytest.fixture(scope="module")
def h200(sm120):
    """Eight GPUs of the recorded H200's compute capability (9.0): the same node, Hopper GPUs."""
    cap = node_read("h200_idle")["gpus"][0]["compute_capability"]
    fit = json.loads(json.dumps(sm120))
    for gpu in fit["gpus"]:
        gpu["compute_capability"] = cap
    return fit


def check(fit: dict, **values) -> tuple[list[str], list[str]]:
    settings = {**SERVE, **values}
    found, instances = serve_problems("ct200", settings, len(fit["gpus"]) or 8)
    assert not found, found
    return sm120_problems("ct200", instances, settings, CT, fit)


def test_the_node_read_reports_each_gpus_compute_capability(sm120, h200):
    assert {tuple(g["compute_capability"]) for g in sm120["gpus"]} == {(12, 0)}
    assert len(sm120["gpus"]) == 8
    assert {tuple(g["compute_capability"]) for g in h200["gpus"]} == {(9, 0)}


def test_fa3_is_refused_naming_instance_option_why_citation_and_sglangs_own_choice(sm120):
    problems, notes = check(sm120, sglang_serve_attention_backend="fa3")
    assert notes == []
    assert len(problems) == 1
    line = problems[0]
    assert line.startswith(
        "ct200: sglang_serve_attention_backend = 'fa3': instance kimi-tp8 on kpro6 (GPUs of "
        "compute capability 12.0, SM120) would run --attention-backend fa3 as the prefill and "
        "decode backend, which has no SM120 path in the locked stack: FlashAttention 3 has no "
        "SM120 kernels")
    assert ("sglang 0.5.12 sglang/srt/layers/attention/attention_registry.py:152 "
            "`assert (major == 8 and not runner.use_mla_backend) or major == 9, (`") in line
    assert "sglang-kernel 0.4.2.post2 flash_ops: sm_80 sm_86 sm_90a only (cuobjdump" in line
    assert line.endswith(
        "Fix: remove it (leave sglang_serve_attention_backend unset, drop the flag from the extra "
        "args); SGLang then picks its own backend for the model on SM12x: flashinfer for MHA "
        "models (triton when the model has attention sinks), triton for MLA models (DeepSeek-V3, "
        "Kimi-K2.5)")


def _settings_for(row: dict) -> dict:
    """Settings that hit one row, set the way a user would: the role's variable for the
    attention backend, the instance's extra args for any other flag, sglang_serve_env for
    environment switches."""
    if row["kind"] == "attention_backend":
        if row["phases"] == ["prefill"]:
            return {"sglang_serve_extra_args": ["--prefill-attention-backend", row["value"]]}
        return {"sglang_serve_attention_backend": row["value"]}
    if row["kind"] == "env":
        return {"sglang_serve_env": {row["name"]: row["values"][0].upper()}}
    flag = {"moe_runner_backend": "--moe-runner-backend",
            "fp8_gemm_backend": "--fp8-gemm-backend"}[row["kind"]]
    instance = {**SERVE["sglang_serve_instances"][0], "extra_args": [f"{flag}={row['value']}"]}
    return {"sglang_serve_instances": [instance]}


@pytest.mark.parametrize("row", TABLE["refusals"], ids=[r["id"] for r in TABLE["refusals"]])
def test_every_row_is_refused_on_sm120_and_nowhere_else(sm120, h200, row):
    settings = _settings_for(row)
    problems, _notes = check(sm120, **settings)
    assert len(problems) == 1, problems
    var = {"attention_backend": "sglang_serve_attention_backend", "env": "sglang_serve_env."}
    expected = var.get(row["kind"], "sglang_serve_instances[0] (kimi-tp8).extra_args")
    if row["kind"] == "attention_backend" and row["phases"] == ["prefill"]:
        expected = "sglang_serve_extra_args"
    assert problems[0].startswith(f"ct200: {expected}"), problems[0]
    assert str(row["why"]).split()[0] in problems[0]
    assert f"SGLang then picks {' '.join(str(row['instead']).split())}" in problems[0]
    for cite in row["cite"]:
        if "line" in cite:
            assert f"{cite['file']}:{cite['line']} `{cite['text']}`" in problems[0]
    assert check(h200, **settings) == ([], [])


@pytest.mark.parametrize(
    "settings",
    [
        {"sglang_serve_attention_backend": "flashinfer"},
        {"sglang_serve_attention_backend": "triton"},
        {"sglang_serve_attention_backend": None},
        {"sglang_serve_extra_args": ["--decode-attention-backend", "trtllm_mha"]},
        {"sglang_serve_extra_args": ["--prefill-attention-backend", "triton",
                                     "--decode-attention-backend", "trtllm_mla"]},
        # the phase-specific flags win over --attention-backend, as in SGLang
        {"sglang_serve_attention_backend": "trtllm_mha",
         "sglang_serve_extra_args": ["--prefill-attention-backend", "flashinfer"]},
        {"sglang_serve_extra_args": ["--moe-runner-backend", "cutlass", "--fp8-gemm-backend",
                                     "flashinfer_cutlass"]},
        {"sglang_serve_env": {"SGLANG_ENABLE_JIT_DEEPGEMM": "0"}},
    ],
    ids=["flashinfer", "triton", "unset", "decode-trtllm_mha", "decode-trtllm_mla",
         "prefill-override", "cutlass", "deepgemm-off"],
)
def test_what_has_an_sm120_path_is_left_allowed(sm120, settings):
    assert check(sm120, **settings) == ([], [])


def test_a_phase_flag_refuses_only_its_phase(sm120):
    problems, _n = check(sm120, sglang_serve_attention_backend="flashinfer",
                         sglang_serve_extra_args=["--prefill-attention-backend", "trtllm_mla"])
    assert len(problems) == 1
    assert ("ct200: sglang_serve_extra_args = ['--prefill-attention-backend', 'trtllm_mla']: "
            "instance kimi-tp8") in problems[0]
    assert "would run --prefill-attention-backend trtllm_mla as the prefill backend" in problems[0]
    assert "flashinfer-python 0.6.11.post1 flashinfer/data/include/flashinfer/trtllm/fmha/" \
           "fmhaRunner.cuh:37" in problems[0]


def test_per_gpu_instances_share_one_line_and_an_instance_env_is_named(sm120):
    problems, _n = check(sm120, sglang_serve_instances=[],
                         sglang_serve_attention_backend="flashmla")
    assert len(problems) == 1
    assert "instances gpu0..gpu7 on kpro6" in problems[0]
    instance = {"name": "kimi-tp8", "gpus": list(range(8)),
                "env": {"SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE": "yes"}}
    problems, _n = check(sm120, sglang_serve_instances=[instance])
    assert problems[0].startswith(
        "ct200: sglang_serve_instances[0] (kimi-tp8).env.SGLANG_OPT_USE_DEEPGEMM_MEGA_MOE = "
        "'yes': instance kimi-tp8")


def test_unknown_compute_capability_is_a_note_not_a_refusal(sm120):
    fit = json.loads(json.dumps(sm120))
    for gpu in fit["gpus"]:
        gpu["compute_capability"] = None
    problems, notes = check(fit, sglang_serve_attention_backend="fa3")
    assert problems == []
    assert notes == ["kimi-tp8: GPU compute capability unknown on kpro6 (no compute capability "
                     "in the node's GPU read): SM120 refusals not checked"]
    # no refused option: nothing to say
    assert check(fit) == ([], [])


def test_a_container_with_some_gpus_is_judged_by_those_gpus(sm120):
    """ct200 given node GPUs [4, 5]: the instance runs on them; here GPU 5 reads as a 9.0 card
    and GPU 4 as 12.0, so the one SM120 GPU is enough to refuse."""
    fit = json.loads(json.dumps(sm120))
    fit["gpus"][5]["compute_capability"] = [9, 0]
    settings = {**SERVE, "sglang_serve_attention_backend": "fa3",
                "sglang_serve_instances": [{"name": "pair", "gpus": [0, 1]}]}
    _found, instances = serve_problems("ct200", settings, 2)
    ct = {"node": "kpro6", "spec": {"name": "ct200", "gpus": [5, 4]}}
    problems, _n = sm120_problems("ct200", instances, settings, ct, fit)
    assert "instance pair on kpro6 (GPUs of compute capability 12.0, SM120)" in problems[0]
    ct["spec"]["gpus"] = [5]
    settings["sglang_serve_instances"] = [{"name": "one", "gpus": [0]}]
    _found, instances = serve_problems("ct200", settings, 1)
    assert sm120_problems("ct200", instances, settings, ct, fit) == ([], [])


def test_flags_are_read_as_argparse_reads_them():
    argv = ["--attention-backend", "fa3", "--attention-backend=triton"]
    assert flag_value(argv, ["a", "b", "b"], "--attention-backend") == (
        "triton", "b", ["--attention-backend=triton"])
    assert flag_value(["--attention-backend"], ["a"], "--attention-backend") is None
    assert flag_value(["--attention-backends", "x"], ["a", "a"], "--attention-backend") is None


def test_env_switch_values_are_sglangs_booleans(sm120):
    instance = {"argv": [], "argv_from": [], "env": {"SGLANG_ENABLE_JIT_DEEPGEMM": "Y"},
                "name": "x"}
    assert [h["row"]["id"] for h in instance_refusals(instance, SERVE, TABLE)] == [
        "env-SGLANG_ENABLE_JIT_DEEPGEMM"]
    instance["env"] = {"SGLANG_ENABLE_JIT_DEEPGEMM": "false"}
    assert instance_refusals(instance, SERVE, TABLE) == []


def test_nvidia_smi_fallback_reads_compute_capability_and_bus_id():
    node_fit = load_file("node_fit_for_sm120", NODE_FIT)
    text = "0, 97887, 12.0, 00000000:06:00.0\n1, 97887, 12.0, 00000000:07:00.0\n"
    gpus = node_fit.smi_gpus(text)
    assert gpus[0] == {"index": 0, "minor": 0, "total": 97887 * 2**20,
                       "compute_capability": [12, 0], "pci_bus_id": "0000:06:00.0"}
    # a driver without compute_cap: the two first fields, as before
    assert node_fit.smi_gpus("0, 81559\n")[0]["compute_capability"] is None


def test_the_table_is_valid_yaml_with_the_kinds_the_code_reads():
    data = yaml.safe_load((ROOT / "roles/sglang_serve/files/sm120_refusals.yml").read_text())
    assert {r["kind"] for r in data["refusals"]} == {"attention_backend", "moe_runner_backend",
                                                     "fp8_gemm_backend", "env"}
