"""The fit of each instance's model in its memory (plugins/plugin_utils/validate_fit.py).

Each case runs the node's side for real: playbooks/files/node_fit.py on a model store of sparse
files (the sizes of real models, no disk used), with the GPU stand-in answering NVML from a
recording (8x RTX PRO 6000 Blackwell, 102,641,958,912 bytes each), and the instances expanded by
the sglang_serve filter itself. Each case takes well under a second.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from ansible_collections.sglang_lxc.serving.plugins.module_utils import sglang_load_progress
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_containers import (
    parse_node_state,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_fit import (
    fit_problems,
    node_folders,
    node_path,
    parse_fit,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_serving import (
    serve_problems,
)

from tests.loaders import ROOT

RECORDINGS = ROOT / "tests/unit/gpu/recordings"
NODE_FIT = ROOT / "playbooks/files/node_fit.py"
READER = ROOT / "plugins/module_utils/sglang_load_progress.py"
GB = 10**9
GIB = 2**30
RTX_PRO_6000 = 102_641_958_912  # NVML's memory.total of one RTX PRO 6000 Blackwell (97.9 GiB)
# where node_fit.py reads /proc and /sys: nowhere (the fit tests record no fabric; the fabric
# tests, test_validate_fabric.py, give it a recorded tree)
NO_NODE_ROOT = "/nonexistent-node-root"


def model(store: Path, name: str, size: int, shards: int = 4, index: bool = True) -> Path:
    """A model folder of sparse safetensors shards adding up to ``size`` bytes, with the
    index SGLang reads (and a stray file the index does not name, which must not count)."""
    folder = store / name
    folder.mkdir(parents=True)
    names = [f"model-{i:05d}-of-{shards:05d}.safetensors" for i in range(1, shards + 1)]
    for number, shard in enumerate(names):
        with open(folder / shard, "wb") as handle:
            handle.truncate(size // shards + (size % shards if number == 0 else 0))
    if index:
        weight_map = {f"layer.{i}.weight": shard for i, shard in enumerate(names)}
        (folder / "model.safetensors.index.json").write_text(json.dumps({"weight_map": weight_map}))
        with open(folder / "consolidated.safetensors", "wb") as handle:
            handle.truncate(50 * GB)
    (folder / "config.json").write_text("{}")
    return folder


def node_read(folders: list[str], recording: str = "rtx_pro_6000_x8_training") -> dict:
    """node_fit.py as node_state.sh runs it, with the recorded NVML answers as pynvml."""
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests/standins/pynvml_recorded"),
           "FAKE_PYNVML_RECORDING": str(RECORDINGS / f"{recording}.json"),
           "SGLANG_LXC_NODE_ROOT": NO_NODE_ROOT}
    proc = subprocess.run(
        [sys.executable, "-c", NODE_FIT.read_text(), READER.read_text(), *folders],
        capture_output=True, text=True, env=env, check=True, timeout=60,
    )
    return parse_fit(proc.stdout.splitlines())


def container(store: Path, memory: int = 491520, gpus="all") -> dict:
    """ct200 on kpro6 as inventory/example has it: the model store is a bind mount."""
    mounts = [{"host_path": str(store), "path": "/srv/models"},
              {"host_path": "/tank/cache/ct200", "path": "/var/cache/sglang"}]
    return {"node": "kpro6",
            "spec": {"name": "ct200", "memory": memory, "gpus": gpus, "mounts": mounts}}


SERVE = {
    "sglang_serve_enabled": True,
    "sglang_serve_model_store": "/srv/models",
    "sglang_serve_port_base": 30000,
    "sglang_serve_host": "127.0.0.1",
    "sglang_serve_instances": [],
    "sglang_serve_gpus": [],
    "sglang_serve_mem_fraction_static": 0.88,
}


def check(store: Path, gpu_count: int = 8, device: str = "cuda", memory: int = 491520, **values):
    """(problems, warnings, notes) of ct200 as the validate action gets them."""
    found, instances = serve_problems("ct200", {**SERVE, **values}, gpu_count)
    assert not found, found
    ct = container(store, memory)
    fit = node_read(node_folders(instances, ct["spec"]["mounts"]))
    return fit_problems("ct200", instances, ct, fit, gpu_count, device=device)


def test_fits_eight_one_gpu_instances_of_a_model_that_fits_one_gpu(tmp_path):
    """Seed 002's batch-generation layout: one server per GPU of a 65.6 GB model."""
    model(tmp_path, "Qwen3-32B", int(65.6 * GB), shards=17)
    problems, warnings, notes = check(tmp_path, sglang_serve_model_path="Qwen3-32B")
    assert problems == [] and warnings == []
    assert notes == ["gpu0..gpu7: 65.6 GB of 90.3 GB each"]


def test_a_model_that_cannot_fit_names_instance_bytes_capacity_and_the_tp_that_fits(tmp_path):
    """inventory/example as it was: one Kimi-K2.5 server per GPU."""
    model(tmp_path, "Kimi-K2.5", 547 * GB, shards=64)
    problems, warnings, _notes = check(tmp_path, sglang_serve_model_path="Kimi-K2.5")
    assert warnings == []
    assert problems == [
        "ct200: sglang_serve_gpus = [0, 1, 2, 3, 4, 5, 6, 7]: each of the 8 instances gpu0..gpu7 "
        "(1 GPU(s) each, tp 1) cannot hold its weights: "
        "547 GB (model Kimi-K2.5 547 GB), more than the 90.3 GB it may use (1 x 102.6 GB x "
        "mem_fraction_static 0.88). Fix: one instance with gpus [0..7], tp 8: 723 GB"
    ]


def test_smaller_tp_is_suggested_when_it_fits_and_more_gpus_when_none_does(tmp_path):
    model(tmp_path, "Qwen3-235B-A22B-FP8", 236 * GB, shards=24)
    problems, _w, _n = check(tmp_path, sglang_serve_model_path="Qwen3-235B-A22B-FP8")
    assert problems[0].endswith("Fix: instances of 4 GPUs, e.g. gpus [0..3], tp 4: 361 GB each")
    model(tmp_path, "huge", 2000 * GB, shards=8)
    problems, _w, _n = check(tmp_path, sglang_serve_model_path="huge")
    assert problems[0].endswith(
        "Fix: the weights need 25 GPUs of 90.3 GB each and the container has 8: give the "
        "container more GPUs, or serve a smaller (quantized) model"
    )


def test_a_model_that_fits_without_room_for_the_kv_cache_is_a_warning(tmp_path):
    model(tmp_path, "tight", 85 * GB)
    problems, warnings, _notes = check(
        tmp_path, sglang_serve_model_path="tight", sglang_serve_gpus=[0])
    assert problems == []
    assert warnings == [
        "ct200: gpu0 holds its weights (85.0 GB of 90.3 GB) but leaves 5.3 GB for the KV cache, "
        "under 10%: instances of 2 GPUs, e.g. gpus [0, 1], tp 2: 181 GB each"
    ]


def test_a_model_not_in_the_store_yet_is_noted_and_not_checked(tmp_path):
    problems, warnings, notes = check(tmp_path, sglang_serve_model_path="Kimi-K2.5")
    assert problems == [] and warnings == []
    assert notes == ["Kimi-K2.5: model not in the store yet: fit not checked"]


def test_the_eagle3_draft_counts_with_the_model(tmp_path):
    model(tmp_path, "Llama-3.3-70B-FP8", 78 * GB, shards=8)
    model(tmp_path, "EAGLE3-LLaMA3.3-70B", 14 * GB, shards=1, index=False)
    base = {"sglang_serve_model_path": "Llama-3.3-70B-FP8", "sglang_serve_gpus": [0]}
    problems, _w, _n = check(tmp_path, **base)
    assert problems == []
    problems, _w, _n = check(tmp_path, **base,
                             sglang_serve_eagle3_draft_model_path="EAGLE3-LLaMA3.3-70B",
                             sglang_serve_eagle3_num_steps=3, sglang_serve_eagle3_topk=1,
                             sglang_serve_eagle3_num_draft_tokens=4)
    assert problems == [
        "ct200: sglang_serve_gpus = [0]: instance gpu0 (GPUs [0], tp 1) cannot hold its weights: "
        "92.0 GB (model Llama-3.3-70B-FP8 78.0 GB + EAGLE-3 draft EAGLE3-LLaMA3.3-70B 14.0 GB), "
        "more than the 90.3 GB it may use (1 x 102.6 GB x mem_fraction_static 0.88). Fix: "
        "instances "
        "of 2 GPUs, e.g. gpus [0, 1], tp 2: 181 GB each"
    ]


def test_cpu_mode_the_container_memory_holds_every_instance_and_its_processes(tmp_path):
    model(tmp_path, "Qwen3-0.6B", int(1.5 * GB), shards=1)
    base = {"sglang_serve_model_path": "Qwen3-0.6B",
            "sglang_serve_instances": [{"name": "a", "gpus": [0]}, {"name": "b", "gpus": [1]}]}
    problems, warnings, notes = check(tmp_path, device="cpu", memory=16384, **base)
    assert problems == [] and warnings == []
    assert notes == ["2 CPU instance(s): 9.4 GB of 17.2 GB"]
    problems, warnings, _n = check(tmp_path, device="cpu", memory=9500, **base)
    assert problems == [] and warnings == [
        "ct200: the 2 CPU instance(s) hold their weights (9.4 GB of 10.0 GB) but leave 519 MB "
        "for the KV cache, under 10%"]
    problems, _w, _n = check(tmp_path, device="cpu", memory=4096, **base)
    assert problems == [
        "ct200: proxmox_lxc_containers[ct200].memory = 4096: 2 CPU instance(s) need 9.4 GB "
        "(3.0 GB of weights + 2 x 3072 MiB per instance, sglang_serve_cpu_instance_mib), more "
        "than the container's 4.3 GB. Fix: give the container memory: 10006 (MiB) or more, or "
        "serve fewer instances or a smaller model"
    ]


def test_unset_mem_fraction_is_sglangs_own_with_its_smallest_reserve(tmp_path):
    """SGLang 0.5.12 reserves at least 10 GiB on a GPU over 60 GiB: 102.6 GB -> 0.895."""
    model(tmp_path, "m", 93 * GB)
    problems, _w, _n = check(tmp_path, sglang_serve_model_path="m", sglang_serve_gpus=[0],
                             sglang_serve_mem_fraction_static=None)
    assert "(1 x 102.6 GB x SGLang's own mem_fraction_static 0.895)" in problems[0]


def test_without_nvml_on_the_node_the_gpu_fit_is_not_checked(tmp_path):
    model(tmp_path, "Kimi-K2.5", 547 * GB)
    _found, instances = serve_problems(
        "ct200", {**SERVE, "sglang_serve_model_path": "Kimi-K2.5"}, 8)
    ct = container(tmp_path)
    fit = node_read(node_folders(instances, ct["spec"]["mounts"]), "no_driver_library")
    problems, _w, notes = fit_problems("ct200", instances, ct, fit, 8)
    assert problems == []
    assert notes[0].startswith("gpu0: GPU memory unknown on kpro6 (NVML: NVMLError_")
    assert notes[0].endswith(": fit not checked")


def test_the_node_read_section_reaches_the_fit(tmp_path):
    """node_state.sh runs node_fit.py with the reader's text and the folders as arguments."""
    folder = model(tmp_path, "Kimi-K2.5", 547 * GB, shards=64)
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests/standins/pynvml_recorded"),
           "FAKE_PYNVML_RECORDING": str(RECORDINGS / "rtx_pro_6000_x8_training.json"),
           "SGLANG_LXC_NODE_ROOT": NO_NODE_ROOT}
    out = subprocess.run(
        ["bash", str(ROOT / "playbooks/files/node_state.sh"), "/bin/false", str(tmp_path),
         str(tmp_path), sys.executable, NODE_FIT.read_text(), READER.read_text(), str(folder)],
        capture_output=True, text=True, env=env, check=True, timeout=60).stdout
    fit = parse_fit(parse_node_state(out)["fit"])
    assert fit["folders"][str(folder)] == {"present": True, "files": 64, "bytes": 547 * GB}
    assert [g["total"] for g in fit["gpus"]] == [RTX_PRO_6000] * 8
    # the same files load progress weighs (one reader)
    files = sglang_load_progress.weight_files(str(folder))
    assert sglang_load_progress.total_size(files) == 547 * GB


def test_node_paths_follow_the_innermost_bind_mount():
    mounts = [{"host_path": "/tank/models", "path": "/srv/models"},
              {"host_path": "/fast/kimi", "path": "/srv/models/Kimi-K2.5"}]
    assert node_path("/srv/models/Qwen3-32B", mounts) == "/tank/models/Qwen3-32B"
    assert node_path("/srv/models/Kimi-K2.5", mounts) == "/fast/kimi"
    assert node_path("/srv/modelsX/a", mounts) is None


def example_values(name: str) -> dict:
    return yaml.safe_load((ROOT / "inventory/example" / name).read_text())


@pytest.mark.parametrize("size", [547 * GB, 547 * GIB], ids=["547GB", "547GiB"])
def test_inventory_example_fits_its_node(tmp_path, size):
    """inventory/example's serving layout on its node (8x RTX PRO 6000, recorded NVML answers)
    with a Kimi-K2.5 folder of the stated size (the seed's "547GB", read both ways)."""
    serve = example_values("group_vars/sglang_servers/serve.yml")
    spec = example_values("host_vars/kpro6.yml")["proxmox_lxc_containers"][0]
    paths = example_values("group_vars/all/paths.yml")
    values = {**SERVE, **{k: v for k, v in serve.items() if k.startswith("sglang_serve_")},
              "sglang_serve_api_key": "",
              "sglang_serve_model_store": paths["sglang_lxc_model_store"]}
    found, instances = serve_problems("ct200", values, paths["sglang_lxc_gpus_expected"])
    assert not found and len(instances) == 1 and instances[0]["tp"] == 8
    store = tmp_path / "tank-models"
    model(store, values["sglang_serve_model_path"], size, shards=64)
    spec["mounts"] = [dict(m, host_path=str(store)) if m["path"] == "/srv/models" else m
                      for m in spec["mounts"]]
    ct = {"node": "kpro6", "spec": spec}
    fit = node_read(node_folders(instances, spec["mounts"]))
    problems, warnings, notes = fit_problems("ct200", instances, ct, fit, 8)
    assert problems == [] and warnings == [], (problems, warnings)
    assert notes == [f"kimi-tp8: {sglang_load_progress.format_bytes(size)} of 723 GB"]


def test_a_container_with_some_gpus_is_weighed_against_those_gpus(tmp_path):
    """ct200 given node GPUs [4, 5] sees them as its GPUs 0 and 1: their NVML memory counts (here
    the recording's GPU 5 is changed into a 48 GB card, so the pair holds 2 x 48 GB x 0.88)."""
    recording = json.loads((RECORDINGS / "rtx_pro_6000_x8_training.json").read_text())
    recording["devices"][5]["memory"]["total"] = 48 * GB
    (tmp_path / "mixed.json").write_text(json.dumps(recording))
    store = tmp_path / "store"
    model(store, "m", 100 * GB)
    values = {**SERVE, "sglang_serve_model_path": "m",
              "sglang_serve_instances": [{"name": "pair", "gpus": [0, 1]}]}
    _found, instances = serve_problems("ct200", values, 2)
    ct = container(store)
    ct["spec"]["gpus"] = [5, 4]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "tests/standins/pynvml_recorded"),
           "FAKE_PYNVML_RECORDING": str(tmp_path / "mixed.json"),
           "SGLANG_LXC_NODE_ROOT": NO_NODE_ROOT}
    out = subprocess.run(
        [sys.executable, "-c", NODE_FIT.read_text(), READER.read_text(),
         *node_folders(instances, ct["spec"]["mounts"])],
        capture_output=True, text=True, env=env, check=True, timeout=60).stdout
    problems, _w, _n = fit_problems("ct200", instances, ct, parse_fit(out.splitlines()), 2)
    assert problems == [
        "ct200: sglang_serve_instances[0] (pair).gpus = [0, 1]: instance pair (GPUs [0, 1], "
        "tp 2) cannot hold its weights: 100 GB (model m 100 GB), more than the 84.5 GB it may "
        "use (2 x 48.0 GB x mem_fraction_static 0.88). Fix: the weights need 3 GPUs of 42.2 GB "
        "each and the container has 2: give the container more GPUs, or serve a smaller "
        "(quantized) model"
    ]
