"""The lab's model (runner/lab_model.py): deterministic, complete, in two real safetensors shards.

SGLang's own server loading and serving it is the lab's proof (README's first command,
tests/integration/serve); here: the files, their bytes twice over, and what transformers reads.
"""

from __future__ import annotations

import hashlib
import json
import math

import jinja2
import safetensors  # the `lab` extra (pyproject.toml), which scripts/bootstrap installs
import tokenizers
from ansible_collections.sglang_lxc.serving.runner import lab_model


def digests(folder):
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.iterdir())}


def test_the_model_is_the_same_bytes_every_time(tmp_path):
    assert lab_model.make(tmp_path / "a" / "tiny-llama")
    assert lab_model.make(tmp_path / "b" / "tiny-llama")
    assert digests(tmp_path / "a" / "tiny-llama") == digests(tmp_path / "b" / "tiny-llama")
    assert not lab_model.make(tmp_path / "a" / "tiny-llama")  # there: left alone
    assert [p.name for p in (tmp_path / "a").iterdir()] == ["tiny-llama"]  # no work folder left


def test_shards_index_config_and_tokenizer(tmp_path):
    dest = tmp_path / "tiny-llama"
    lab_model.make(dest)
    config = json.loads((dest / "config.json").read_text())
    assert (config["architectures"], config["hidden_size"], config["num_hidden_layers"]) == (
        ["LlamaForCausalLM"],
        64,
        2,
    )
    index = json.loads((dest / "model.safetensors.index.json").read_text())
    shards = sorted(set(index["weight_map"].values()))
    assert shards == ["model-00001-of-00002.safetensors", "model-00002-of-00002.safetensors"]
    seen = {}
    for shard in shards:
        with safetensors.safe_open(str(dest / shard), "np") as handle:
            for name in handle.keys():  # noqa: SIM118  # safe_open is not a mapping
                seen[name] = handle.metadata()
    assert set(seen) == set(index["weight_map"]) == set(lab_model.shapes())
    raw = (dest / shards[0]).read_bytes()
    header = json.loads(raw[8 : 8 + int.from_bytes(raw[:8], "little")])
    assert {v["dtype"] for k, v in header.items() if k != "__metadata__"} == {"BF16"}
    tokenizer = tokenizers.Tokenizer.from_file(str(dest / "tokenizer.json"))
    assert tokenizer.get_vocab_size() == config["vocab_size"] == 512
    assert tokenizer.decode(tokenizer.encode("Hello, SGLang!").ids) == "Hello, SGLang!"
    settings = json.loads((dest / "tokenizer_config.json").read_text())
    prompt = jinja2.Template(settings["chat_template"]).render(
        messages=[{"role": "user", "content": "Hi"}],
        add_generation_prompt=True,
        bos_token=settings["bos_token"],
    )
    assert prompt == "<|begin_of_text|><|start|>user\nHi<|end|>\n<|start|>assistant\n"


def test_a_larger_llama_of_the_same_kind_in_as_many_shards_as_asked(tmp_path):
    """The jit lab's load test makes a 2.0 GB Llama in 40 shards this way; here a small one:
    every shard holds tensors (none empty, which SGLang's index would not name), the config and
    the shapes match, and a tensor larger than the values drawn repeats them."""
    dims = lab_model.Dims(hidden=128, layers=3, heads=4, kv_heads=2, intermediate=10240, shards=5)
    dest = tmp_path / "larger"
    assert lab_model.make(dest, dims)
    config = json.loads((dest / "config.json").read_text())
    assert (config["hidden_size"], config["num_hidden_layers"], config["head_dim"]) == (128, 3, 32)
    index = json.loads((dest / "model.safetensors.index.json").read_text())
    files = sorted(p.name for p in dest.glob("*.safetensors"))
    assert files == sorted(set(index["weight_map"].values())) and len(files) == 5
    shapes = {}
    for name in files:
        with safetensors.safe_open(str(dest / name), "np") as handle:
            for key in handle.keys():  # noqa: SIM118  # safe_open is not a mapping
                shapes[key] = tuple(handle.get_slice(key).get_shape())
    assert shapes == lab_model.shapes(dims)
    assert index["metadata"]["total_size"] == 2 * sum(math.prod(s) for s in shapes.values())
    # the bf16 values of one large tensor, as raw 16-bit words (numpy has no bfloat16)
    key = "model.layers.0.mlp.gate_proj.weight"
    raw = (dest / index["weight_map"][key]).read_bytes()
    size = int.from_bytes(raw[:8], "little")
    begin, end = json.loads(raw[8 : 8 + size])[key]["data_offsets"]
    words = [raw[8 + size + i : 10 + size + i] for i in range(begin, end, 2)]
    drawn = lab_model.DRAWN
    assert len(words) == 128 * 10240 > drawn and words[drawn:] == words[: len(words) - drawn]
    assert len(set(words[:drawn])) > 1000  # drawn, not a constant
