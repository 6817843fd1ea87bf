"""Build the flashinfer JIT modules a model needs into the shared cache, before instances start.

Run by the sglang_serve role (sglang_serve_jit_warmup: true) as the service user, with the same
environment as the instances (FLASHINFER_WORKSPACE_BASE, FLASHINFER_CUDA_ARCH_LIST, CUDA_HOME),
so the eight instances of a node find the kernels built once instead of compiling them eight times
at their first requests. It only compiles and links (JitSpec.build): no GPU is touched.

    python sglang-jit-warmup.py --env-file /etc/sglang/cuda.env --model-path /srv/models/M \
        --modules norm,activation,attention

Prints one JSON object: per module its name, whether it was built now (false: reused from the
cache), seconds; and the workspace folder. Exit 1 when a build fails.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

KINDS = ("norm", "activation", "attention")


def load_env_file(path: str) -> None:
    """KEY=VALUE lines of a systemd EnvironmentFile; the caller's environment wins."""
    with open(path, encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line or line.startswith("#") or "=" not in line:
                continue
            key, _eq, value = line.partition("=")
            os.environ.setdefault(key.strip(), value.strip().strip('"'))


def model_shape(model_path: str) -> dict | None:
    """Head size and dtype from the model's config.json; None when there is none."""
    config_path = os.path.join(model_path, "config.json")
    if not model_path or not os.path.isfile(config_path):
        return None
    with open(config_path, encoding="utf-8") as handle:
        config = json.load(handle)
    config = config.get("text_config", config)
    heads = config.get("num_attention_heads") or 1
    head_dim = config.get("head_dim") or config.get("hidden_size", 0) // heads
    return {
        "head_dim": int(head_dim),
        "dtype": str(config.get("torch_dtype") or config.get("dtype") or "bfloat16"),
        "mla": "kv_lora_rank" in config,
    }


def specs(kinds: list[str], shape: dict | None) -> tuple[list, list[str]]:
    import torch
    from flashinfer import jit

    chosen, skipped = [], []
    if "norm" in kinds:
        from flashinfer.jit.norm import gen_norm_module

        chosen.append(gen_norm_module())
    if "activation" in kinds:
        chosen.append(jit.gen_act_and_mul_module("silu"))
    if "attention" in kinds:
        if shape is None:
            skipped.append("attention: no config.json at the model path")
        elif shape["mla"]:
            skipped.append("attention: MLA model, its kernels are not warmed here")
        else:
            dtype = getattr(torch, shape["dtype"].removeprefix("torch."), torch.bfloat16)
            dim = shape["head_dim"]
            chosen.append(
                jit.gen_batch_decode_module(
                    dtype, dtype, dtype, torch.int32, dim, dim, 0, False, False
                )
            )
            chosen.append(
                jit.gen_batch_prefill_module(
                    "fa2", dtype, dtype, dtype, torch.int32, dim, dim, 0, False, False, False
                )
            )
    return chosen, skipped


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env-file", action="append", default=[])
    parser.add_argument("--model-path", default="")
    parser.add_argument("--modules", default=",".join(KINDS))
    args = parser.parse_args()
    for path in args.env_file:
        if os.path.isfile(path):
            load_env_file(path)
    kinds = [k for k in args.modules.split(",") if k]
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        parser.error(f"unknown modules {unknown}; choose from {list(KINDS)}")

    from flashinfer.jit import env as jit_env

    chosen, skipped = specs(kinds, model_shape(args.model_path))
    report = {"workspace": str(jit_env.FLASHINFER_WORKSPACE_DIR), "modules": [], "skipped": skipped}
    for spec in chosen:
        library = spec.jit_library_path
        before = library.stat().st_mtime_ns if library.exists() else None
        start = time.monotonic()
        try:
            spec.build(verbose=False)
        except Exception as exc:  # one line for the play, the rest on stderr
            print(f"{spec.name}: {exc}", file=sys.stderr)
            report["failed"] = spec.name
            print(json.dumps(report))
            return 1
        after = library.stat().st_mtime_ns
        report["modules"].append(
            {
                "name": spec.name,
                "built": before != after,
                "seconds": round(time.monotonic() - start, 1),
                "library": str(library),
            }
        )
    print(json.dumps(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())
