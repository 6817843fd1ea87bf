# Copyright: sglang-lxc contributors
# Apache-2.0
"""Known failures of SGLang 0.5.12 on RTX PRO 6000 Blackwell (compute capability 12.0, SM120),
matched in the journal tail of a crashed (or hung) instance, each with its fix.

Module sglang_readiness puts each line (``known failure: ...; fix: ...``) after SGLang's own log
lines in the failure message and the report. Every pattern is unit-tested on log lines recorded
from public reports (tests/unit/serve/recordings/crash_*.log, each citing its thread). The
source lines cited below are of the locked SGLang 0.5.12 wheel (``srt/`` is
``python/sglang/srt``). Plain Python, no Ansible: the readiness module runs it bare on the target.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

# How many of the unit's last journal lines are matched (the message quotes fewer: log_lines).
# A TP group's ranks print their tracebacks one after the other, then systemd its exit lines.
MATCH_LINES = 200

# SM120's shared memory per thread block, the "Hardware limit" Triton reports on it.
SM120_SHARED_MEMORY = 101376

# The kernel libraries of the lock's sgl-kernel wheel (sglang-kernel 0.4.2.post2) without SM120
# code, as cuobjdump --list-elf lists them (the sglang role's checklist line "sgl_kernel
# cubins", roles/sglang/README.md "When a source build is worth it"); common_ops and spatial_ops
# hold sm_120a. (library, what it is, its cubins, words of a traceback that name it, what runs it)
KERNEL_LIBRARIES: tuple[tuple[str, str, str, re.Pattern[str], str], ...] = (
    (
        "flash_ops", "FA3", "sm_80 sm_86 sm_90a",
        re.compile(r"flash_ops|sgl_kernel/flash_attn|flash_fwd_launch_template", re.I),
        "the fa3 attention backend runs it (srt/layers/attention/flashattention_backend.py:169 "
        "imports sgl_kernel.flash_attn)",
    ),
    (
        "flashmla_ops", "FlashMLA", "sm_90a sm_100a sm_103a",
        re.compile(r"flashmla|flash_mla|flash_fwd_mla", re.I),
        "the flashmla attention backend and the DSA models' flashmla_* NSA backends run it "
        "(srt/layers/attention/flashmla_backend.py:12, nsa_backend.py:1741 import "
        "sgl_kernel.flash_mla)",
    ),
)

NO_KERNEL_IMAGE = re.compile(
    r"no kernel image is available for execution on the device|cudaErrorNoKernelImageForDevice")
OUT_OF_MEMORY = re.compile(r"CUDA out of memory|OutOfMemoryError|CUDA error: out of memory")
# cuda_graph_runner.py:734-740 wraps the capture's error as "Capture cuda graph failed: <error>"
# and adds its "Possible solutions" (mem fraction, max bs) whatever the error was: only an
# out-of-memory error counts here.
GRAPH_CAPTURE = re.compile(r"Capture cuda graph failed|cuda_graph_runner|Capture cuda graph begin",
                           re.I)
NCCL = re.compile(
    r"NCCL error|ncclUnhandledCudaError|ncclSystemError|ncclInternalError|ncclRemoteError|"
    r"ncclInvalidUsage|Watchdog caught collective operation timeout|NCCL communicator was aborted")
# DeepGEMM's host assertions read "Assertion error (<file>:<line>): <reason>"
# (deep_gemm csrc/utils/exception.hpp, DGException).
DEEPGEMM_ARCH = re.compile(r"Assertion error \(([^()]*?):\d+\): Unsupported architecture")
TRITON_SHARED_MEMORY = re.compile(
    r"OutOfResources: (?:out of resource: )?shared memory(?:, Required: (\d+), "
    r"Hardware limit: (\d+))?")
# flashinfer's trtllm-gen FMHA runner accepts SM100/SM103 only (flashinfer issue 3263).
TRTLLM_GEN_ARCH = re.compile(r"TllmGenFmhaRunner'?.{0,200}?Unsupported architecture")
SERVER_ARG = re.compile(r"\b(mem_fraction_static|cuda_graph_max_bs)=([0-9.]+)")


def _argument(instance: Mapping[str, Any], option: str) -> tuple[str | None, str]:
    """(value, variable it came from) of ``option`` in the instance's resolved argv."""
    argv = [str(a) for a in instance.get("argv") or []]
    sources = [str(s) for s in instance.get("argv_from") or []]
    for index, arg in enumerate(argv):
        source = sources[index] if index < len(sources) else ""
        if arg == option and index + 1 < len(argv):
            return argv[index + 1], source
        if arg.startswith(option + "="):
            return arg.split("=", 1)[1], source
    return None, ""


def _logged(lines: Sequence[str]) -> dict[str, str]:
    """mem_fraction_static and cuda_graph_max_bs as SGLang logged them at its start
    (``server_args=ServerArgs(...)``, srt/entrypoints/engine.py:773), when that line is in view."""
    found: dict[str, str] = {}
    for line in lines:
        if "ServerArgs(" in line:
            found.update(SERVER_ARG.findall(line))
    return found


def _tp(instance: Mapping[str, Any]) -> int | None:
    try:
        return int(instance.get("tp") or len(instance.get("gpus") or []) or 0) or None
    except (TypeError, ValueError):
        return None


def cuda_graph_oom(lines: Sequence[str], instance: Mapping[str, Any]) -> str | None:
    text = "\n".join(lines)
    captured = any("Capture cuda graph failed" in line and OUT_OF_MEMORY.search(line)
                   for line in lines)
    if not captured and not (OUT_OF_MEMORY.search(text) and GRAPH_CAPTURE.search(text)):
        return None
    logged = _logged(lines)
    fraction, fraction_var = _argument(instance, "--mem-fraction-static")
    if fraction is not None:
        lower = f"lower {fraction_var or 'sglang_serve_mem_fraction_static'} (now {fraction})"
    elif "mem_fraction_static" in logged:
        lower = ("set sglang_serve_mem_fraction_static below SGLang's own choice "
                 f"({logged['mem_fraction_static']})")
    else:
        lower = ("set sglang_serve_mem_fraction_static below SGLang's own choice (its "
                 "server_args line at the start shows mem_fraction_static)")
    max_bs, max_bs_var = _argument(instance, "--cuda-graph-max-bs")
    if max_bs is not None and max_bs.isdigit():
        source = max_bs_var or "sglang_serve_extra_args"
        smaller = (f"pass a smaller --cuda-graph-max-bs in {source} (now {max_bs}), "
                   f"e.g. {max(1, int(max_bs) // 2)}")
    elif logged.get("cuda_graph_max_bs", "").isdigit():
        now = int(logged["cuda_graph_max_bs"])
        smaller = (f"pass --cuda-graph-max-bs {max(1, now // 2)} in sglang_serve_extra_args "
                   f"(SGLang chose {now})")
    else:
        tp = _tp(instance)
        default = 512 if tp and tp >= 4 else 256
        at = f"{default} at TP {tp}" if tp else "256 below TP 4, 512 from TP 4"
        smaller = (f"pass --cuda-graph-max-bs {default // 2} in sglang_serve_extra_args "
                   f"(SGLang's default on a 90-160 GB GPU: {at}, srt/server_args.py:1466-1475)")
    return (
        "known failure: CUDA out of memory while capturing CUDA graphs (what mem_fraction_static "
        "leaves of each GPU after the weights and the KV cache pool does not hold the graphs of "
        f"every batch size up to --cuda-graph-max-bs); fix: {lower} or {smaller}"
    )


def no_kernel_image(lines: Sequence[str], instance: Mapping[str, Any]) -> str | None:
    if not any(NO_KERNEL_IMAGE.search(line) for line in lines):
        return None
    text = "\n".join(lines)
    for library, what, cubins, words, used_by in KERNEL_LIBRARIES:
        if words.search(text):
            return (
                f"known failure: no kernel image for this GPU in sgl-kernel's {library} ({what}): "
                f"the lock's wheel holds cubins for {cubins} only, no sm_120 (the sglang role's "
                f"cubin listing); {used_by}; fix: leave sglang_serve_attention_backend "
                "unset (SGLang 0.5.12 picks flashinfer for MHA and triton for MLA models on "
                "SM120, srt/server_args.py:2625-2646) or set triton or flashinfer, and pass no "
                f"{'fa3' if library == 'flash_ops' else 'flashmla'} in "
                "--prefill-attention-backend/--decode-attention-backend"
            )
    return (
        "known failure: no kernel image for this GPU's architecture in a kernel library the "
        "traceback above names; fix: compare it with the sglang role's checklist line "
        "\"sgl_kernel cubins\" (the lock's wheel: flash_ops sm_80 sm_86 sm_90a and flashmla_ops "
        "sm_90a sm_100a sm_103a have no sm_120, common_ops and spatial_ops have sm_120a) and "
        "choose a backend whose library holds sm_120 (sglang_serve_attention_backend unset lets "
        "SGLang pick); a flashinfer JIT cache built for another GPU is rebuilt after clearing "
        "sglang_serve_cache_dir"
    )


def nccl(lines: Sequence[str], instance: Mapping[str, Any]) -> str | None:
    found = next((line for line in lines if NCCL.search(line)), None)
    if found is None:
        return None
    gpus = list(instance.get("gpus") or [])
    if len(gpus) < 2:
        return (
            "known failure: NCCL error, in an instance without a tensor-parallel group over "
            "PCIe; fix: NCCL_DEBUG=INFO in the instance's env shows NCCL's own cause"
        )
    group = ",".join(map(str, gpus))
    return (
        f"known failure: NCCL error in the tensor-parallel group of {len(gpus)} GPUs ({group}): "
        "peer-to-peer traffic between the GPUs fails or stalls on the PCIe fabric, most often "
        "through the Proxmox node's IOMMU or the PCIe ACS of the bridges above the GPUs; fix: "
        "iommu=pt on the node's kernel command line (a reboot), or ACS disabled on those "
        "bridges, or NCCL_P2P_DISABLE=1 in the instance's env (traffic through host memory, "
        "slower); the validate play's fabric verdict for the group names which"
    )


def deepgemm_arch(lines: Sequence[str], instance: Mapping[str, Any]) -> str | None:
    match = next((m for m in map(DEEPGEMM_ARCH.search, lines) if m), None)
    if match is None:
        return None
    where = match.group(1).rsplit("/", 1)[-1] or match.group(1)
    text = "\n".join(lines)
    head = f"known failure: DeepGEMM asserted on the architecture ({where}: no SM120 kernel)"
    if where == "hyperconnection.hpp":
        return (
            f"{head} in the hyper-connection pre-norm GEMM (tf32_hc_prenorm_gemm); fix: "
            "SGLANG_OPT_DEEPGEMM_HC_PRENORM=0 in sglang_serve_env (or the instance's env) takes "
            "SGLang's other path (srt/environ.py:583, srt/layers/mhc.py:674, "
            "srt/models/deepseek_v4.py:720)"
        )
    if where == "attention.hpp":
        v4 = re.search(r"deepseek_v4|dsv4", text)
        nsa = re.search(r"nsa_backend|nsa_indexer|dsa_backend|nsa/", text)
        torch_path = (
            "SGLANG_FP8_PAGED_MQA_LOGITS_TORCH=1 in sglang_serve_env makes DeepSeek-V4's indexer "
            "use torch instead (srt/environ.py:590, srt/layers/attention/dsv4/metadata.py:106, "
            "dsv4/indexer.py:380)"
        )
        no_switch = (
            "the DSA models' NSA indexer (DeepSeek-V3.2, GLM-5) calls DeepGEMM directly with "
            "no switch in SGLang 0.5.12 (srt/layers/attention/nsa_backend.py:650-666, "
            "nsa/nsa_indexer.py:488-491): such a model does not run on SM120 with this lock"
        )
        fix = torch_path if v4 and not nsa else no_switch if nsa and not v4 else (
            f"{torch_path}; {no_switch}")
        return f"{head} in the sparse-attention indexer's MQA logits; fix: {fix}"
    return (
        f"{head}; fix: SGLANG_ENABLE_JIT_DEEPGEMM=0 in sglang_serve_env (or the instance's env) "
        "turns SGLang's DeepGEMM GEMM and MoE paths off for its other kernels "
        "(srt/environ.py:399, read by srt/layers/deep_gemm_wrapper/configurer.py:29)"
    )


def triton_shared_memory(lines: Sequence[str], instance: Mapping[str, Any]) -> str | None:
    match = next((m for m in map(TRITON_SHARED_MEMORY.search, lines) if m), None)
    if match is None:
        return None
    needs = (f"{match.group(1)} bytes of shared memory per block, the GPU has {match.group(2)}"
             if match.group(1) else f"more shared memory per block than SM120's "
             f"{SM120_SHARED_MEMORY} bytes")
    moe_fix = (
        "a tuned config for this GPU and the model's expert shape in the folder "
        "SGLANG_MOE_CONFIG_DIR names (configs/triton_<version>/E=..,N=..,device_name=...json, "
        "fewer num_stages or smaller blocks; "
        "srt/layers/moe/moe_runner/triton_utils/fused_moe_triton_config.py:19-34, 74), or "
        "another --moe-runner-backend for the model's quantization in sglang_serve_extra_args "
        "(the checklist's resolved line shows SGLang's own: moe ...)"
    )
    if re.search(r"fused_moe|moe_runner|fused_experts", "\n".join(lines)):
        return (
            f"known failure: Triton's fused MoE kernel needs {needs}: SGLang 0.5.12 has no tuned "
            "config for this GPU and expert shape and took its default (get_default_config, "
            "fused_moe_triton_config.py:146-209: fp8_w8a8 128x256x128 blocks in 4 stages), "
            f"sized for GPUs with more shared memory than SM120; fix: {moe_fix}"
        )
    return (
        f"known failure: a Triton kernel needs {needs} (sized for GPUs with more shared memory "
        "than SM120; the traceback above names the kernel); fix: for the fused MoE kernel, "
        f"{moe_fix}; for an attention kernel, another attention backend "
        "(sglang_serve_attention_backend unset lets SGLang pick)"
    )


def trtllm_gen_arch(lines: Sequence[str], instance: Mapping[str, Any]) -> str | None:
    if not any(TRTLLM_GEN_ARCH.search(line) for line in lines):
        return None
    return (
        "known failure: flashinfer's trtllm-gen attention kernels (TllmGenFmhaRunner) run on "
        "SM100/SM103 only (flashinfer issue 3263), and the trtllm_mla prefill took them "
        "(sglang issue 24633: SGLang's guard allows trtllm_mla on every Blackwell, "
        "srt/server_args.py:2714-2717); fix: leave sglang_serve_attention_backend unset "
        "(SGLang 0.5.12 picks triton for MLA and flashinfer for MHA models on SM120, "
        "srt/server_args.py:2625-2646) or pass --prefill-attention-backend triton"
    )


PATTERNS = (
    cuda_graph_oom,
    no_kernel_image,
    nccl,
    deepgemm_arch,
    triton_shared_memory,
    trtllm_gen_arch,
)


def explain(lines: Sequence[str], instance: Mapping[str, Any] | None = None) -> list[str]:
    """One ``known failure: <what>; fix: <fix>`` line per known failure that ``lines`` (a unit's
    journal tail) show, in the order of PATTERNS; ``instance`` (the role's resolved instance:
    gpus, tp, argv, argv_from) names the settings to change and their values."""
    lines = [str(line) for line in lines]
    instance = instance or {}
    found = {pattern: pattern(lines, instance) for pattern in PATTERNS}
    # When one rank of a TP group dies, the others' collectives fail or time out too: an NCCL
    # error beside another known failure is its consequence, not the cause.
    if any(text for pattern, text in found.items() if pattern is not nccl):
        found[nccl] = None
    return [text for text in found.values() if text]
