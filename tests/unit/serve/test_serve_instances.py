"""Instance expansion and input checks of sglang_serve (plugins/plugin_utils/serve_instances.py,
filters in plugins/filter/sglang_serve.py)."""

from __future__ import annotations

import json
import re

import pytest
from serve_helpers import ROOT, serve_instances

expand = serve_instances.sglang_serve_instances
Error = serve_instances.ServeConfigError

BASE = {
    "instances": [],
    "gpus": [],
    "port_base": 30000,
    "host": "127.0.0.1",
    "allow_insecure_bind": False,
    "model_path": "/srv/models/Qwen3-8B",
    "served_model_name": "",
    "attention_backend": "flashinfer",
    "mem_fraction_static": None,
    "context_length": None,
    "eagle3_draft_model_path": "",
    "eagle3_num_steps": None,
    "eagle3_topk": None,
    "eagle3_num_draft_tokens": None,
    "multithread_load": True,
    "multithread_load_threads": 16,
    "enable_metrics": True,
    "extra_args": [],
    "env": {},
    "hf_offline": True,
    "cache_dir": "/var/cache/sglang",
    "home": "/var/lib/sglang",
    "model_store": "/srv/models",
}


def settings(**changes):
    return {**BASE, **changes}


def flag(argv, name):
    return argv[argv.index(name) + 1]


def test_one_instance_per_gpu():
    instances = expand(settings(), 8)
    assert [i["name"] for i in instances] == [f"gpu{i}" for i in range(8)]
    assert [i["port"] for i in instances] == list(range(30000, 30008))
    third = instances[3]
    assert third["unit"] == "sglang@gpu3.service"
    assert third["env"]["CUDA_VISIBLE_DEVICES"] == "3"
    assert third["env"]["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
    assert third["env"]["HF_HUB_OFFLINE"] == "1"
    assert third["env"]["TRITON_CACHE_DIR"] == "/var/cache/sglang/triton"
    assert third["devices"][0] == "/dev/nvidia3"
    assert "/dev/nvidiactl" in third["devices"]
    argv = third["argv"]
    assert flag(argv, "--port") == "30003"
    assert flag(argv, "--tp") == "1"
    assert flag(argv, "--served-model-name") == "Qwen3-8B"
    assert flag(argv, "--attention-backend") == "flashinfer"
    assert json.loads(flag(argv, "--model-loader-extra-config")) == {
        "enable_multithread_load": True,
        "num_threads": 16,
    }
    assert "--enable-metrics" in argv
    assert "--api-key" not in argv


def test_selected_gpus_and_relative_model_path():
    instances = expand(settings(gpus=[2, 5], model_path="Kimi-K2.5"), 8)
    assert [(i["name"], i["port"]) for i in instances] == [("gpu2", 30002), ("gpu5", 30005)]
    assert instances[0]["model_path"] == "/srv/models/Kimi-K2.5"


def test_tensor_parallel_group_and_overrides():
    instances = expand(
        settings(
            instances=[
                {"name": "tp4", "gpus": [0, 1, 2, 3], "port": 31000, "mem_fraction_static": 0.8},
                {"name": "small", "gpus": [4], "served_model_name": "s", "env": {"X": "1"}},
            ]
        ),
        8,
    )
    tp4, small = instances
    assert tp4["env"]["CUDA_VISIBLE_DEVICES"] == "0,1,2,3"
    assert flag(tp4["argv"], "--tp") == "4"
    assert flag(tp4["argv"], "--mem-fraction-static") == "0.8"
    assert tp4["devices"][:4] == [f"/dev/nvidia{i}" for i in range(4)]
    assert small["port"] == 30004
    assert small["served_model_name"] == "s"
    assert small["env"]["X"] == "1"


def test_eagle3_all_given():
    argv = expand(
        settings(
            eagle3_draft_model_path="draft",
            eagle3_num_steps=3,
            eagle3_topk=4,
            eagle3_num_draft_tokens=16,
        ),
        1,
    )[0]["argv"]
    assert flag(argv, "--speculative-algorithm") == "EAGLE3"
    assert flag(argv, "--speculative-draft-model-path") == "/srv/models/draft"
    assert flag(argv, "--speculative-num-draft-tokens") == "16"


def test_endpoints():
    instances = expand(settings(host="0.0.0.0", allow_insecure_bind=True), 2)
    assert serve_instances.sglang_serve_endpoints(instances) == [
        "http://127.0.0.1:30000",
        "http://127.0.0.1:30001",
    ]


@pytest.mark.parametrize(
    ("changes", "gpu_count", "words"),
    [
        (
            {
                "instances": [
                    {"name": "a", "gpus": [0], "port": 1},
                    {"name": "b", "gpus": [1], "port": 1},
                ]
            },
            8,
            ["a", "b", "port 1"],
        ),
        (
            {"instances": [{"name": "a", "gpus": [0, 1]}, {"name": "b", "gpus": [1]}]},
            8,
            ["GPU 1", "a", "b"],
        ),
        ({"gpus": [9]}, 8, ["GPU index 9", "sglang_serve_gpu_count = 8"]),
        ({"instances": [{"name": "x", "gpus": [8]}]}, 8, ["sglang_serve_instances[0]", "8"]),
        ({"mem_fraction_static": 1.2}, 8, ["sglang_serve_mem_fraction_static", "(0, 1)"]),
        ({"mem_fraction_static": 0}, 8, ["sglang_serve_mem_fraction_static"]),
        (
            {"eagle3_draft_model_path": "d", "eagle3_num_steps": 3},
            8,
            ["sglang_serve_eagle3_topk", "sglang_serve_eagle3_num_draft_tokens"],
        ),
        ({"host": "0.0.0.0"}, 8, ["sglang_serve_host", "sglang_serve_api_key"]),
        ({"model_path": ""}, 8, ["sglang_serve_model_path"]),
        ({}, 0, ["no GPU", "sglang_serve_enabled"]),
        ({"instances": [{"name": "bad/name", "gpus": [0]}]}, 8, ["bad/name"]),
        ({"instances": [{"name": "a", "gpus": [0], "colour": 1}]}, 8, ["colour"]),
        ({"instances": [{"name": "a", "gpus": [0, 1, 2], "tp": 2}]}, 8, ["tp = 2"]),
        ({"extra_args": ["--api-key", "k"]}, 8, ["sglang_serve_api_key"]),
        ({"extra_args": "--x y"}, 8, ["sglang_serve_extra_args"]),
        ({"env": {"BAD-NAME": "1"}}, 8, ["sglang_serve_env"]),
        ({"instances": [{"name": "a", "gpus": [0]}, {"name": "a", "gpus": [1]}]}, 8, ["named a"]),
    ],
)
def test_bad_input_names_the_variable(changes, gpu_count, words):
    with pytest.raises(Error) as info:
        expand(settings(**changes), gpu_count)
    for word in words:
        assert word in str(info.value)


def test_non_loopback_with_key_or_switch():
    assert expand(settings(host="10.0.3.5"), 1, True)[0]["probe_host"] == "10.0.3.5"
    assert expand(settings(host="0.0.0.0", allow_insecure_bind=True), 1)[0]["host"] == "0.0.0.0"


def test_loopback_detection():
    assert serve_instances.is_loopback("127.0.0.1")
    assert serve_instances.is_loopback("::1")
    assert serve_instances.is_loopback("localhost")
    assert not serve_instances.is_loopback("0.0.0.0")
    assert not serve_instances.is_loopback("10.0.3.250")


def test_jit_caches_are_per_cuda_version_and_shared_by_every_instance():
    instances = expand(settings(cuda_version="13.0"), 8)
    for instance in instances:
        env = instance["env"]
        assert env["FLASHINFER_WORKSPACE_BASE"] == "/var/cache/sglang/cuda-13.0"
        assert env["TRITON_CACHE_DIR"] == "/var/cache/sglang/cuda-13.0/triton"
        assert env["TORCH_EXTENSIONS_DIR"] == "/var/cache/sglang/cuda-13.0/torch_extensions"
        assert env["HF_HOME"] == "/var/cache/sglang/huggingface"  # not tied to CUDA
    other = expand(settings(cuda_version="12.9"), 1)[0]["env"]
    assert other["TRITON_CACHE_DIR"] == "/var/cache/sglang/cuda-12.9/triton"


def test_cuda_version_must_be_major_minor():
    with pytest.raises(serve_instances.ServeConfigError, match="sglang_serve_cuda_version"):
        expand(settings(cuda_version="13"), 1)


def test_the_attention_backend_is_sglangs_choice_unless_set():
    """The role's default is empty: no --attention-backend, SGLang picks for the model and the
    GPU (ServerArgs._get_default_attn_backend, srt/server_args.py). A value set is passed."""
    for unset in ("", None):
        (one,) = expand(settings(attention_backend=unset), 1)
        assert "--attention-backend" not in one["argv"]
    (one,) = expand(settings(attention_backend="triton"), 1)
    assert flag(one["argv"], "--attention-backend") == "triton"
    assert one["argv_from"][one["argv"].index("--attention-backend")] == (
        "sglang_serve_attention_backend")
    # an instance may go back to SGLang's choice under a role-wide value
    (one,) = expand(settings(instances=[{"name": "g", "gpus": [0], "attention_backend": ""}]), 1)
    assert "--attention-backend" not in one["argv"]


def test_a_cpu_instance_without_a_backend_lets_sglang_pick_torch_native():
    (one,) = expand(settings(device="cpu", attention_backend="", instances=[{"name": "cpu0"}]), 0)
    assert "--attention-backend" not in one["argv"]
    assert flag(one["argv"], "--device") == "cpu"
    # What SGLang 0.5.12 then does, recorded (recordings/README.md): _handle_cpu_backends picks
    # intel_amx (server_args.py:1266-1271), and without AMX or sgl-kernel's CPU ops it falls back
    # (server_args.py:2809-2818) to torch_native, the backend the lab sets by name.
    fallback, server_args = (ROOT / "tests/unit/serve/recordings/server_args_cpu.log").read_text(
    ).splitlines()[1:3]
    assert fallback.endswith("The current platform does not support Intel AMX, will fallback to "
                             "torch_native backend.")
    assert "device='cpu'" in server_args and "attention_backend='torch_native'" in server_args


def test_a_gpu_backend_set_on_a_cpu_instance_is_refused_naming_the_fix():
    with pytest.raises(Error) as refused:
        expand(settings(device="cpu", attention_backend="flashinfer", instances=[{"name": "c"}]), 0)
    text = str(refused.value)
    # the words the lab's serving test (case gpu-backend-on-cpu) looks for
    assert "sglang_serve_attention_backend = flashinfer does not run on a CPU instance" in text
    assert "torch_native" in text and "leave it unset" in text


def test_the_example_leaves_the_attention_backend_to_sglang():
    example = (ROOT / "inventory/example/group_vars/sglang_servers/serve.yml").read_text()
    assert not re.search(r"^sglang_serve_attention_backend:", example, re.M)
    assert "triton" in example  # the comment says what SGLang picks for Kimi-K2.5 (MLA)


CPU = {"device": "cpu", "attention_backend": "torch_native"}


def test_cpu_instances_have_no_gpus_and_the_cpu_engine():
    pair = expand(settings(**CPU, instances=[{"name": "cpu0"}, {"name": "cpu1", "port": 31000}]), 0)
    assert [(i["name"], i["port"], i["gpus"], i["devices"], i["tp"]) for i in pair] == [
        ("cpu0", 30000, [], [], 1),
        ("cpu1", 31000, [], [], 1),
    ]
    argv, env = pair[0]["argv"], pair[0]["env"]
    assert argv[argv.index("--device") + 1] == "cpu"
    assert argv[argv.index("--attention-backend") + 1] == "torch_native"
    assert env["SGLANG_USE_CPU_ENGINE"] == "1"
    assert env["CUDA_VISIBLE_DEVICES"] == ""
    assert env["LD_LIBRARY_PATH"] == "/usr/local/libexec/sglang/cpu-lib"
    assert "CPU (tp 1)" in serve_instances.sglang_serve_describe(pair[0])


def test_cpu_instance_keeps_its_own_library_path_after_the_stub_folder():
    (one,) = expand(
        settings(
            **CPU, cpu_lib_dir="/x/lib", instances=[{"name": "c", "env": {"LD_LIBRARY_PATH": "/y"}}]
        ),
        0,
    )
    assert one["env"]["LD_LIBRARY_PATH"] == "/x/lib:/y"


def test_gpu_instances_get_no_stub_and_no_cpu_engine():
    (one,) = expand(settings(), 1)
    assert "--device" not in one["argv"]
    assert "SGLANG_USE_CPU_ENGINE" not in one["env"]
    assert "LD_LIBRARY_PATH" not in one["env"]


def test_device_per_instance_mixes_gpu_and_cpu():
    mixed = expand(
        settings(
            instances=[
                {"name": "g", "gpus": [0]},
                {"name": "c", "device": "cpu", "attention_backend": "torch_native", "port": 31000},
            ]
        ),
        1,
    )
    assert [i["device"] for i in mixed] == ["cuda", "cpu"]


@pytest.mark.parametrize(
    ("changes", "words"),
    [
        ({**CPU, "instances": [{"name": "c", "gpus": [0]}]}, "takes no GPUs"),
        ({"device": "cpu", "instances": [{"name": "c"}]}, "does not run on a CPU instance"),
        ({"device": "tpu", "instances": [{"name": "c", "gpus": [0]}]}, "must be one of cuda, cpu"),
        ({**CPU}, "needs explicit sglang_serve_instances"),
        ({"env": {"LD_PRELOAD": "/opt/cuda/lib/stubs/libcuda.so"}}, "would hide the driver"),
        (
            {"cpu_libcuda_stub": "/t/stub/libcuda.so", "env": {"LD_LIBRARY_PATH": "/a:/t/stub"}},
            "holds the libcuda stub (/t/stub)",
        ),
    ],
    ids=["cpu-gpus", "cpu-flashinfer", "bad-device", "cpu-per-gpu", "preload-stub", "stub-dir"],
)
def test_cpu_mode_refusals(changes, words):
    with pytest.raises(Error, match=re.escape(words)):
        expand(settings(**changes), 2)


def test_sleep_on_idle_is_an_argument():
    (one,) = expand(settings(sleep_on_idle=True), 1)
    assert "--sleep-on-idle" in one["argv"]
    (two,) = expand(settings(sleep_on_idle=False), 1)
    assert "--sleep-on-idle" not in two["argv"]


def test_the_fabric_env_of_a_group_is_applied_and_the_inventory_wins():
    """What the validate play's fabric verdict chose for a TP group (NCCL_P2P_DISABLE=1 where
    ACS redirects its peer-to-peer traffic) reaches that group only; the inventory's own env
    (the role's, the instance's) wins over it."""
    fabric = {"tp4": {"NCCL_P2P_DISABLE": "1", "NCCL_DEBUG": "WARN"}}
    tp4, small = expand(settings(
        instances=[{"name": "tp4", "gpus": [0, 1, 2, 3]},
                   {"name": "small", "gpus": [4], "env": {"NCCL_P2P_DISABLE": "0"}}],
        fabric_env={**fabric, "small": {"NCCL_P2P_DISABLE": "1"}}), 8)
    assert tp4["env"]["NCCL_P2P_DISABLE"] == "1" and tp4["env"]["NCCL_DEBUG"] == "WARN"
    assert small["env"]["NCCL_P2P_DISABLE"] == "0"  # the instance's env wins
    (alone,) = expand(settings(instances=[{"name": "tp4", "gpus": [0, 1, 2, 3]}],
                               fabric_env=fabric, env={"NCCL_DEBUG": "INFO"}), 8)
    assert alone["env"]["NCCL_DEBUG"] == "INFO"  # sglang_serve_env wins
    (untouched,) = expand(settings(instances=[{"name": "other", "gpus": [0, 1]}],
                                   fabric_env=fabric), 8)
    assert "NCCL_P2P_DISABLE" not in untouched["env"]
