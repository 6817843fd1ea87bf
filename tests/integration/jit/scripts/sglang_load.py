"""SGLang 0.5.12's own weight loader as the main process of an sglang@ unit.

Run with the serving venv's python, in a lab container (no GPU):

  make DIR SHARDS SHARD_MB   write a generated model of SHARDS safetensors files (fp16 tensors),
                             its index and config.json, flushed to disk and dropped from the
                             page cache, so that a load reads it from the disk
  serve ARGS...              the unit's command: read ARGS with SGLang's own prepare_server_args
                             (its --config file merged inside the process: the API key, of which
                             only a sha256 prefix is printed), list the weight files as SGLang's
                             loader does (the index drops files it does not name), load every
                             tensor on CPU with weight_utils' iterator (multi-thread when
                             --model-loader-extra-config enables it, as DefaultModelLoader does),
                             then wait for a signal: it loads and never serves (the builders venv
                             holds no sgl-kernel, so SGLang's server cannot start here; the real
                             server is tested in tests/integration/serve)

Every line of the load side is SGLang's code; the test reads the load's progress, not answers.
"""

from __future__ import annotations

import json
import os
import sys
import time


def make(folder: str, shards: str, shard_mb: str) -> dict:
    import torch
    from safetensors.torch import save_file

    os.makedirs(folder, mode=0o755, exist_ok=True)
    for name in os.listdir(folder):  # a model made before, with another shard count
        os.unlink(os.path.join(folder, name))
    count, size = int(shards), int(shard_mb) * 1024 * 1024
    weight_map, total = {}, 0
    for index in range(1, count + 1):
        name = f"model-{index:05d}-of-{count:05d}.safetensors"
        tensors = {}
        for part in range(4):  # four tensors a shard
            key = f"model.layers.{index - 1}.mlp.w{part}.weight"
            raw = torch.full((size // 4,), (index * 4 + part) % 251, dtype=torch.uint8)
            tensors[key] = raw.view(torch.float16).reshape(-1, 1024)
            weight_map[key] = name
        path = os.path.join(folder, name)
        save_file(tensors, path)
        total += os.path.getsize(path)
    with open(os.path.join(folder, "model.safetensors.index.json"), "w", encoding="utf-8") as f:
        json.dump({"metadata": {"total_size": total}, "weight_map": weight_map}, f)
    with open(os.path.join(folder, "config.json"), "w", encoding="utf-8") as f:
        json.dump({"architectures": ["LlamaForCausalLM"], "model_type": "llama",
                   "torch_dtype": "float16", "hidden_size": 1024, "intermediate_size": 2048,
                   "num_attention_heads": 8, "num_hidden_layers": count,
                   "num_key_value_heads": 8, "vocab_size": 32000}, f)
    os.sync()
    for name in os.listdir(folder):  # out of the page cache: the load must read the disk
        os.chmod(os.path.join(folder, name), 0o644)  # the service user reads the model store
        fd = os.open(os.path.join(folder, name), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return {"folder": folder, "shards": count, "bytes": total}


def serve(*argv: str) -> None:
    import glob
    import hashlib
    import signal

    from sglang.srt.model_loader import weight_utils
    from sglang.srt.server_args import prepare_server_args

    # what launch_server does first; --device cpu: ServerArgs asks torch for an accelerator
    args = prepare_server_args([*argv, "--device", "cpu"])
    digest = hashlib.sha256((args.api_key or "").encode()).hexdigest()[:16]
    print(f"sglang-load: prepare_server_args read api_key sha256:{digest}", flush=True)
    folder = args.model_path
    files = sorted(glob.glob(os.path.join(folder, "*.safetensors")))
    index = "model.safetensors.index.json"
    files = weight_utils.filter_duplicate_safetensors_files(files, folder, index)
    files = weight_utils.filter_files_not_needed_for_inference(files)
    extra = json.loads(args.model_loader_extra_config or "{}")
    print(f"sglang-load: {len(files)} weight files in {folder}", flush=True)
    start = time.monotonic()
    if extra.get("enable_multithread_load"):
        iterator = weight_utils.multi_thread_safetensors_weights_iterator(
            files, max_workers=int(extra.get("num_threads", 8))
        )
    else:
        iterator = weight_utils.safetensors_weights_iterator(files)
    tensors, loaded = 0, 0
    for _name, tensor in iterator:
        tensors += 1
        loaded += tensor.numel() * tensor.element_size()
    seconds = time.monotonic() - start
    print(
        f"sglang-load: {tensors} tensors, {loaded} bytes in {seconds:.1f} s "
        f"({loaded / max(seconds, 1e-9) / 1e6:.1f} MB/s)",
        flush=True,
    )
    while True:  # loaded: stay up (no HTTP side) until systemd stops the unit
        signal.pause()


def main() -> None:
    what, *rest = sys.argv[1:]
    if what == "make":
        print(json.dumps(make(*rest)))
    elif what == "serve":
        serve(*rest)
    else:
        raise SystemExit(f"unknown command {what}")


if __name__ == "__main__":
    main()
