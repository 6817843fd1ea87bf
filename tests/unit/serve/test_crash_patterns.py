"""Crashes explained: each known SM120 failure of sglang_crash_patterns turns log lines recorded
from public reports (recordings/crash_*.log, first line: the thread) into its fix line, and
readiness puts that line after SGLang's own lines (no systemd, no network)."""

from __future__ import annotations

from pathlib import Path

import pytest
from ansible_collections.sglang_lxc.serving.plugins.module_utils import (
    sglang_crash_patterns as patterns,
)
from serve_helpers import readiness

RECORDINGS = Path(__file__).parent / "recordings"

# kimi-tp8 of inventory/example as the filter resolves it (the parts the fixes read)
KIMI = {
    "name": "kimi-tp8", "unit": "sglang@kimi-tp8.service", "gpus": list(range(8)), "tp": 8,
    "argv": ["--model-path", "/srv/models/Kimi-K2.5", "--tp", "8",
             "--mem-fraction-static", "0.88"],
    "argv_from": ["sglang_serve_model_path"] * 2 + ["sglang_serve_instances[0] (kimi-tp8).gpus"] * 2
    + ["sglang_serve_mem_fraction_static"] * 2,
}


def recorded(name: str) -> list[str]:
    """The report's lines, without the first line that cites it."""
    first, *lines = (RECORDINGS / f"crash_{name}.log").read_text().splitlines()
    assert first.startswith("# https://github.com/"), first
    return lines


def test_every_recording_cites_its_report():
    files = sorted(RECORDINGS.glob("crash_*.log"))
    assert len(files) >= 10
    for path in files:
        assert path.read_text().startswith("# https://github.com/"), path.name


def test_cuda_graph_oom_names_the_two_settings_with_their_values():
    (line,) = patterns.explain(recorded("cuda_graph_oom"), KIMI)
    assert line == (
        "known failure: CUDA out of memory while capturing CUDA graphs (what mem_fraction_static "
        "leaves of each GPU after the weights and the KV cache pool does not hold the graphs of "
        "every batch size up to --cuda-graph-max-bs); fix: lower sglang_serve_mem_fraction_static "
        "(now 0.88) or pass --cuda-graph-max-bs 256 in sglang_serve_extra_args (SGLang's default "
        "on a 90-160 GB GPU: 512 at TP 8, srt/server_args.py:1466-1475)"
    )


def test_cuda_graph_oom_reads_a_max_bs_given_and_sglangs_own_fraction():
    kimi = {**KIMI, "argv": ["--tp", "8", "--cuda-graph-max-bs", "128"],
            "argv_from": ["x", "x", "sglang_serve_extra_args", "sglang_serve_extra_args"]}
    server_args = (RECORDINGS / "server_args_cpu.log").read_text().splitlines()[2]
    (line,) = patterns.explain([server_args, *recorded("cuda_graph_oom")], kimi)
    assert line.endswith(
        "fix: set sglang_serve_mem_fraction_static below SGLang's own choice (0.843) or pass a "
        "smaller --cuda-graph-max-bs in sglang_serve_extra_args (now 128), e.g. 64")


def test_a_capture_that_failed_for_another_reason_is_not_called_out_of_memory():
    # SGLang appends "set --mem-fraction-static ..." to every capture failure
    assert patterns.explain(recorded("cuda_graph_not_oom"), KIMI) == []


def test_no_kernel_image_in_fa3_names_flash_ops_and_the_backend():
    (line,) = patterns.explain(recorded("no_kernel_image_fa3"), KIMI)
    assert line.startswith(
        "known failure: no kernel image for this GPU in sgl-kernel's flash_ops (FA3): the lock's "
        "wheel holds cubins for sm_80 sm_86 sm_90a only, no sm_120 (the sglang role's cubin "
        "listing); the fa3 attention backend runs it "
        "(srt/layers/attention/flashattention_backend.py:169 imports sgl_kernel.flash_attn); "
        "fix: leave sglang_serve_attention_backend unset")
    assert line.endswith("pass no fa3 in --prefill-attention-backend/--decode-attention-backend")


def test_no_kernel_image_in_flashmla_names_flashmla_ops():
    (line,) = patterns.explain(recorded("no_kernel_image_flashmla"), KIMI)
    assert "sgl-kernel's flashmla_ops (FlashMLA): the lock's wheel holds cubins for sm_90a " \
        "sm_100a sm_103a only, no sm_120" in line
    assert "srt/layers/attention/flashmla_backend.py:12" in line
    assert line.endswith(
        "pass no flashmla in --prefill-attention-backend/--decode-attention-backend")


def test_no_kernel_image_of_an_unnamed_library_points_at_the_cubin_listing():
    (line,) = patterns.explain(recorded("no_kernel_image_unnamed"), KIMI)
    assert line.startswith("known failure: no kernel image for this GPU's architecture in a "
                           "kernel library the traceback above names; fix: compare it with the "
                           "sglang role's checklist line \"sgl_kernel cubins\"")


@pytest.mark.parametrize("name", ["nccl_error", "nccl_timeout"])
def test_nccl_errors_of_a_tp_group_point_at_the_pcie_fabric(name):
    (line,) = patterns.explain(recorded(name), KIMI)
    assert line == (
        "known failure: NCCL error in the tensor-parallel group of 8 GPUs (0,1,2,3,4,5,6,7): "
        "peer-to-peer traffic between the GPUs fails or stalls on the PCIe fabric, most often "
        "through the Proxmox node's IOMMU or the PCIe ACS of the bridges above the GPUs; fix: "
        "iommu=pt on the node's kernel command line (a reboot), or ACS disabled on those "
        "bridges, or NCCL_P2P_DISABLE=1 in the instance's env (traffic through host memory, "
        "slower); the validate play's fabric verdict for the group names which"
    )


def test_an_nccl_error_of_one_gpu_is_not_the_fabric():
    (line,) = patterns.explain(recorded("nccl_error"), {"gpus": [0]})
    assert "without a tensor-parallel group" in line and "iommu" not in line


def test_an_nccl_error_beside_another_known_failure_is_its_consequence():
    lines = recorded("cuda_graph_oom") + recorded("nccl_timeout")
    (line,) = patterns.explain(lines, KIMI)
    assert line.startswith("known failure: CUDA out of memory while capturing CUDA graphs")


def test_deepgemm_in_the_dsa_indexer_names_the_v4_switch_and_the_nsa_dead_end():
    # the recorded line names no caller: both the DeepSeek-V4 and the NSA indexer are named
    (line,) = patterns.explain(recorded("deepgemm_dsa"), KIMI)
    assert line.startswith(
        "known failure: DeepGEMM asserted on the architecture (attention.hpp: no SM120 kernel) "
        "in the sparse-attention indexer's MQA logits; fix: SGLANG_FP8_PAGED_MQA_LOGITS_TORCH=1")
    assert line.endswith(
        "the DSA models' NSA indexer (DeepSeek-V3.2, GLM-5) calls DeepGEMM directly with no "
        "switch in SGLang 0.5.12 (srt/layers/attention/nsa_backend.py:650-666, "
        "nsa/nsa_indexer.py:488-491): such a model does not run on SM120 with this lock")


def test_deepgemm_in_the_hyper_connection_gemm_has_its_own_switch():
    (line,) = patterns.explain(recorded("deepgemm_hc"), KIMI)
    assert line == (
        "known failure: DeepGEMM asserted on the architecture (hyperconnection.hpp: no SM120 "
        "kernel) in the hyper-connection pre-norm GEMM (tf32_hc_prenorm_gemm); fix: "
        "SGLANG_OPT_DEEPGEMM_HC_PRENORM=0 in sglang_serve_env (or the instance's env) takes "
        "SGLang's other path (srt/environ.py:583, srt/layers/mhc.py:674, "
        "srt/models/deepseek_v4.py:720)"
    )


def test_deepgemm_elsewhere_is_switched_off_by_sglangs_own_variable():
    (text,) = patterns.explain(recorded("deepgemm_gemm"), KIMI)
    assert text.startswith("known failure: DeepGEMM asserted on the architecture (gemm.hpp: no "
                           "SM120 kernel); fix: SGLANG_ENABLE_JIT_DEEPGEMM=0")
    assert text.endswith("fix: SGLANG_ENABLE_JIT_DEEPGEMM=0 in sglang_serve_env (or the "
                         "instance's env) turns SGLang's DeepGEMM GEMM and MoE paths off for its "
                         "other kernels (srt/environ.py:399, read by "
                         "srt/layers/deep_gemm_wrapper/configurer.py:29)")


@pytest.mark.parametrize("name", ["triton_smem_moe", "triton_smem_out_of_resource"])
def test_triton_shared_memory_gives_the_moe_config_and_runner_fix(name):
    (line,) = patterns.explain(recorded(name), KIMI)
    assert line.startswith("known failure: a Triton kernel needs 147456 bytes of shared memory "
                           "per block, the GPU has 101376")
    assert "SGLANG_MOE_CONFIG_DIR" in line and "another --moe-runner-backend" in line


def test_the_fused_moe_frames_name_the_kernel():
    """Issue 21782's frames (SM120; its stored copy ends before the error line) before the error
    line of PR 28038's report of the same failure: the frames make the fix the MoE one."""
    frames = recorded("triton_moe_frames")
    assert patterns.explain(frames, KIMI) == []  # the stored report ends before its error line
    (line,) = patterns.explain([*frames, *recorded("triton_smem_moe")], KIMI)
    assert line.startswith(
        "known failure: Triton's fused MoE kernel needs 147456 bytes of shared memory per block, "
        "the GPU has 101376: SGLang 0.5.12 has no tuned config for this GPU and expert shape and "
        "took its default (get_default_config, fused_moe_triton_config.py:146-209")


def test_trtllm_gen_on_sm120_names_the_mla_prefill():
    (line,) = patterns.explain(recorded("trtllm_gen_arch"), KIMI)
    assert line.startswith("known failure: flashinfer's trtllm-gen attention kernels "
                           "(TllmGenFmhaRunner) run on SM100/SM103 only (flashinfer issue 3263)")
    assert line.endswith("or pass --prefill-attention-backend triton")


def test_every_pattern_has_a_recording():
    matched = set()
    for path in RECORDINGS.glob("crash_*.log"):
        lines = recorded(path.stem.removeprefix("crash_"))
        matched |= {p.__name__ for p in patterns.PATTERNS if p(lines, KIMI)}
    assert matched == {p.__name__ for p in patterns.PATTERNS}


def test_the_fix_follows_sglangs_own_lines_in_the_message_and_the_report(monkeypatch):
    """A crashed instance's message: its detail, SGLang's last lines, then the known failure;
    the report the same. The matcher reads more lines than the message quotes."""
    tail = recorded("cuda_graph_oom")
    asked = []

    def journal_tail(unit, lines):
        asked.append(lines)
        return tail[-lines:]

    monkeypatch.setattr(readiness, "journal_tail", journal_tail)
    monkeypatch.setattr(readiness, "Nvml", lambda: None)
    monkeypatch.setattr(readiness, "observe", lambda inst, base, key, nvml, **kw: {
        "crash": "process exited (exit status 1); systemd will restart it", "port_open": False,
        "http_status": None, "log_count": 9, "baseline": {"restarts": 0, "invocation": "a"}})
    result = readiness.run_round({
        "instances": [{**KIMI, "port": 30000, "probe_host": "127.0.0.1",
                       "served_model_name": "kimi-k2.5"}],
        "api_key": "", "interval": 1, "poll": 1, "stall_timeout": 900, "timeout": 3600,
        "state": {}, "log_lines": 3})
    assert result["outcome"] == "crashed"
    assert asked == [patterns.MATCH_LINES]
    lines = result["msg"].splitlines()
    assert lines[1:3] == [
        "sglang@kimi-tp8.service crashed: process exited (exit status 1); systemd will restart it",
        "last 3 log lines of sglang@kimi-tp8.service:",
    ]
    assert lines[3:6] == [f"    {line}" for line in tail[-3:]]
    assert lines[6].startswith("known failure: CUDA out of memory while capturing CUDA graphs")
    assert lines[6] in result["report"]
    assert result["instances"][0]["known_failures"] == [lines[6]]
    assert result["instances"][0]["log_tail"] == tail[-3:]



def test_a_hung_tp_group_gets_its_known_failure_too(monkeypatch):
    """A group stuck in a collective is hung before NCCL's watchdog ends it: a hung instance's
    tail is matched as a crashed one's."""
    clock = [1000.0]
    monkeypatch.setattr(readiness.time, "time", lambda: clock[0])
    monkeypatch.setattr(readiness.time, "sleep", lambda s: clock.__setitem__(0, clock[0] + s))
    monkeypatch.setattr(readiness, "Nvml", lambda: None)
    monkeypatch.setattr(readiness, "journal_tail", lambda unit, n: recorded("nccl_timeout"))
    monkeypatch.setattr(readiness, "observe", lambda inst, base, key, nvml, **kw: {
        "crash": None, "port_open": False, "http_status": None, "log_count": 7,
        "baseline": {"restarts": 0, "invocation": "a"}})
    params = {
        "instances": [{**KIMI, "port": 30000, "probe_host": "127.0.0.1",
                       "served_model_name": "kimi-k2.5"}],
        "api_key": "", "interval": 5, "poll": 1, "stall_timeout": 10, "timeout": 3600,
        "state": {}, "log_lines": 20}
    for _ in range(10):
        result = readiness.run_round(params)
        if result["done"]:
            break
        params["state"] = result["state"]
    assert result["outcome"] == "hung"
    assert result["msg"].splitlines()[-1].startswith(
        "known failure: NCCL error in the tensor-parallel group of 8 GPUs (0,1,2,3,4,5,6,7)")
