"""The lab's model: a tiny Llama that SGLang's real server loads and serves on CPU.

Made from this code alone, nothing downloaded, the same bytes on every machine: a byte-level BPE
tokenizer of 512 tokens trained by ``tokenizers`` on a fixed text, and random bf16 weights from a
seeded ``numpy`` generator, written by ``safetensors`` in two shards with their index.

    python -m ansible_collections.sglang_lxc.serving.runner.lab_model DEST

writes DEST/ (config.json, tokenizer.json, shards...).

The weights mean nothing (the answers are nonsense text); what is real is every file SGLang and
transformers read: config.json (LlamaForCausalLM, hidden 64, 2 layers), generation_config.json,
tokenizer.json, tokenizer_config.json with a chat template, model-0000{1,2}-of-00002.safetensors
and model.safetensors.index.json. The folder is written aside and renamed into place, so a
half-written model is never served; an existing DEST is left alone.

``make(dest, Dims(...))`` writes a larger Llama of the same kind, for tests that need a load
that takes a while (tests/integration/jit: 2.1 GB in 40 shards, read through a throttle). Each
tensor holds at most a million drawn values, repeated to its size, so that size costs a copy,
not a draw; the tiny model's tensors are all smaller, and its bytes are unchanged.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

SEED = 20261203
VOCAB = 512
HIDDEN = 64
LAYERS = 2
HEADS = 4
KV_HEADS = 2
INTERMEDIATE = 128
CONTEXT = 2048
SHARDS = 2
DRAWN = 1 << 20  # values drawn for a tensor at most; a larger one repeats them
SPECIAL = ["<|begin_of_text|>", "<|end_of_text|>", "<|start|>", "<|end|>"]
CHAT_TEMPLATE = (
    "{{ bos_token }}{% for message in messages %}<|start|>{{ message['role'] }}\n"
    "{{ message['content'] }}<|end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|start|>assistant\n{% endif %}"
)
# The tokenizer's training text: fixed, so the merges (and every file) are the same each time.
CORPUS = [
    "SGLang serves large language models on NVIDIA Blackwell workstation GPUs.",
    "Each instance loads its weights, warms up, and answers on its own port.",
    "The router sends each request to a healthy worker behind it.",
    "Proxmox runs the servers in LXC containers with their GPUs passed through.",
    "A tiny model answers with nonsense text, quickly, on any CPU.",
    "The quick brown fox jumps over the lazy dog; 0123456789.",
    "user assistant system: hello, how are you today? What is the capital of France?",
]


@dataclass(frozen=True)
class Dims:
    """A Llama's sizes (the vocabulary is the tokenizer's)."""

    hidden: int = HIDDEN
    layers: int = LAYERS
    heads: int = HEADS
    kv_heads: int = KV_HEADS
    intermediate: int = INTERMEDIATE
    shards: int = SHARDS


TINY = Dims()


def config(dims: Dims = TINY) -> dict:
    return {
        "architectures": ["LlamaForCausalLM"],
        "model_type": "llama",
        "vocab_size": VOCAB,
        "hidden_size": dims.hidden,
        "intermediate_size": dims.intermediate,
        "num_hidden_layers": dims.layers,
        "num_attention_heads": dims.heads,
        "num_key_value_heads": dims.kv_heads,
        "head_dim": dims.hidden // dims.heads,
        "hidden_act": "silu",
        "max_position_embeddings": CONTEXT,
        "rms_norm_eps": 1e-6,
        "rope_theta": 10000.0,
        "attention_bias": False,
        "mlp_bias": False,
        "tie_word_embeddings": False,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "torch_dtype": "bfloat16",
    }


def shapes(dims: Dims = TINY) -> dict[str, tuple[int, ...]]:
    """Every tensor of LlamaForCausalLM for config(dims), in a fixed order."""
    hidden, inter = dims.hidden, dims.intermediate
    head = hidden // dims.heads
    out: dict[str, tuple[int, ...]] = {"model.embed_tokens.weight": (VOCAB, hidden)}
    for i in range(dims.layers):
        p = f"model.layers.{i}"
        out[f"{p}.input_layernorm.weight"] = (hidden,)
        out[f"{p}.self_attn.q_proj.weight"] = (dims.heads * head, hidden)
        out[f"{p}.self_attn.k_proj.weight"] = (dims.kv_heads * head, hidden)
        out[f"{p}.self_attn.v_proj.weight"] = (dims.kv_heads * head, hidden)
        out[f"{p}.self_attn.o_proj.weight"] = (hidden, dims.heads * head)
        out[f"{p}.post_attention_layernorm.weight"] = (hidden,)
        out[f"{p}.mlp.gate_proj.weight"] = (inter, hidden)
        out[f"{p}.mlp.up_proj.weight"] = (inter, hidden)
        out[f"{p}.mlp.down_proj.weight"] = (hidden, inter)
    out["model.norm.weight"] = (hidden,)
    out["lm_head.weight"] = (VOCAB, hidden)
    return out


def bf16(values):
    """float32 array -> bfloat16 bits as a little-endian uint16 array (round to nearest even)."""
    import numpy as np

    bits = np.ascontiguousarray(values, dtype="<f4").view("<u4")
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return np.ascontiguousarray(rounded.astype("<u2"))


def write_weights(dest: Path, dims: Dims = TINY) -> None:
    import math

    import numpy as np
    from safetensors import TensorSpec, serialize_file  # safetensors 0.8's writer

    rng = np.random.default_rng(SEED)
    arrays = {}
    for name, shape in shapes(dims).items():
        if name.endswith("norm.weight"):
            arrays[name] = bf16(np.ones(shape, dtype=np.float32))
            continue
        count = math.prod(shape)
        drawn = bf16(rng.normal(0.0, 0.02, size=min(count, DRAWN)).astype(np.float32))
        # kept alive while serialize_file reads their buffers
        arrays[name] = np.resize(drawn, shape) if count > DRAWN else drawn.reshape(shape)
    names = list(arrays)
    shards = dims.shards
    # as even as can be, the longer parts first (the tiny model: 11 tensors, then 10)
    size, longer = divmod(len(names), shards)
    bounds = [index * size + min(index, longer) for index in range(shards + 1)]
    weight_map = {}
    total = 0
    for index in range(shards):
        part = names[bounds[index] : bounds[index + 1]]
        file = f"model-{index + 1:05d}-of-{shards:05d}.safetensors"
        specs = {
            n: TensorSpec(
                dtype="bfloat16",
                shape=list(arrays[n].shape),
                data_ptr=arrays[n].ctypes.data,
                data_len=arrays[n].nbytes,
            )
            for n in part
        }
        serialize_file(specs, str(dest / file), metadata={"format": "pt"})
        for name in part:
            weight_map[name] = file
            total += arrays[name].nbytes
    index_file = {"metadata": {"total_size": total}, "weight_map": weight_map}
    (dest / "model.safetensors.index.json").write_text(json.dumps(index_file, indent=2) + "\n")


def write_tokenizer(dest: Path) -> None:
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB,
        special_tokens=SPECIAL,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    numbers = [" ".join(str(n) for n in range(start, start + 50)) for start in range(0, 1000, 50)]
    tokenizer.train_from_iterator(CORPUS * 4 + numbers, trainer=trainer)
    tokenizer.save(str(dest / "tokenizer.json"))
    (dest / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "tokenizer_class": "PreTrainedTokenizerFast",
                "bos_token": SPECIAL[0],
                "eos_token": SPECIAL[1],
                "pad_token": SPECIAL[1],
                "model_max_length": CONTEXT,
                "clean_up_tokenization_spaces": False,
                "chat_template": CHAT_TEMPLATE,
            },
            indent=2,
        )
        + "\n"
    )


def make(dest: Path, dims: Dims = TINY) -> bool:
    """Write the model to ``dest``; False when it is already there (left alone)."""
    if (dest / "config.json").exists():
        return False
    dest.parent.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{dest.name}.", dir=dest.parent))
    try:
        (work / "config.json").write_text(json.dumps(config(dims), indent=2) + "\n")
        generation = {"bos_token_id": 0, "eos_token_id": 1, "max_new_tokens": 32}
        (work / "generation_config.json").write_text(json.dumps(generation, indent=2) + "\n")
        write_tokenizer(work)
        write_weights(work, dims)
        os.chmod(work, 0o755)
        for path in work.iterdir():
            os.chmod(path, 0o644)
        os.rename(work, dest)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ansible_collections.sglang_lxc.serving.runner.lab_model",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("dest", type=Path, help="the model's folder (made; left alone if there)")
    args = parser.parse_args(argv)
    made = make(args.dest)
    print(f"{'made' if made else 'kept'} {args.dest}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
