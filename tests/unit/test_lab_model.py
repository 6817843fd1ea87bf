"""The lab's model (runner/lab_model.py): deterministic, complete, in two real safetensors shards.

SGLang's own server loading and serving it is the lab's proof (README's first command,
tests/integration/serve); here: the files, their bytes twice over, and what transformers reads.
"""

from __future__ import annotations

import hashlib
import json

import jinja2
import pytest

lab_model = pytest.importorskip("sglang_lxc.lab_model")
safetensors = pytest.importorskip("safetensors")
tokenizers = pytest.importorskip("tokenizers")


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
