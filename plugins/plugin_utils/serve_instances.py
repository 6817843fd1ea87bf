"""sglang_serve's instances: turn inventory settings into a checked list of instances.

``sglang_serve_instances(settings, gpu_count)`` expands "one instance per GPU" or the explicit
``sglang_serve_instances`` list into fully resolved instances (name, unit, GPUs, port, argv,
environment, device nodes) and raises ``ServeConfigError`` (an ``AnsibleFilterError``) with a
message that names the offending variable before anything on the host changes. Each instance also
says which variable every argument came from (``argv_from``), so that an argument SGLang's own
parser refuses is reported by the name a person sets. The API key never enters the result: the
role writes it into each instance's ``--config`` YAML file under ``no_log``.

Also what the role and the play read of resolved instances: ``sglang_serve_endpoints`` (worker
URLs for a router), ``sglang_serve_deployed`` (the deploy record's copy) and
``sglang_serve_describe`` (one line each). The filters in plugins/filter/sglang_serve.py wrap
these; the validation pass (plugin_utils/validate_serving.py) runs the same checks.
Unit-tested in tests/unit/serve.
"""

from __future__ import annotations

import difflib
import json
import posixpath
import re
from collections.abc import Mapping, Sequence
from typing import Any

from ansible.errors import AnsibleFilterError
from ansible.module_utils.parsing.convert_bool import boolean
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.prometheus_targets import (
    is_loopback,  # the one reading of a loopback address (brackets, any case)
)

INSTANCE_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
# The settings of sglang_serve's instances, the one list (OVERRIDABLE, SETTINGS, INSTANCE_KEYS):
# key -> the type of role variable "sglang_serve_" + key. tasks/validate.yml hands the role's
# variables to ``role_settings``, and so does the validation pass (validate_serving.py);
# tests/unit/serve/test_settings.py holds meta/argument_specs.yml (the role variables and the
# suboptions of sglang_serve_instances), the defaults and the README in step with it.
#
# Per-instance overrides of role-wide settings (key in an instance == suffix of the role variable).
OVERRIDABLE: dict[str, str] = {
    "device": "str",
    "host": "str",
    "model_path": "str",
    "served_model_name": "str",
    "attention_backend": "str",
    "mem_fraction_static": "float",
    "context_length": "int",
    "eagle3_draft_model_path": "str",
    "eagle3_num_steps": "int",
    "eagle3_topk": "int",
    "eagle3_num_draft_tokens": "int",
    "multithread_load": "bool",
    "multithread_load_threads": "int",
    "enable_metrics": "bool",
    "extra_args": "list",
    "sleep_on_idle": "bool",
}
# Every role variable the expansion reads.
SETTINGS: dict[str, str] = {
    "instances": "list",
    "gpus": "list",
    "port_base": "int",
    "allow_insecure_bind": "bool",
    **OVERRIDABLE,
    "env": "dict",
    "fabric_env": "dict",
    "hf_offline": "bool",
    "cache_dir": "str",
    "cuda_version": "str",
    "home": "str",
    "model_store": "str",
    "allow_model_outside_store": "bool",
    "cpu_libcuda_stub": "path",
    "cpu_lib_dir": "path",
}
EAGLE3_KEYS = tuple(k for k in OVERRIDABLE if k.startswith("eagle3_"))
# An instance's keys and their types: its own, then the overrides.
INSTANCE_KEYS: dict[str, str] = {
    "name": "str",
    "gpus": "list",
    "port": "int",
    "tp": "int",
    "env": "dict",
    **{k: SETTINGS[k] for k in OVERRIDABLE},
}
DEVICES = ("cuda", "cpu")
# Attention backends SGLang 0.5.12 runs on a CPU device (server_args.py, ATTENTION_BACKEND_CHOICES):
# torch_native everywhere, intel_amx on CPUs with AMX; every other backend needs a GPU.
CPU_ATTENTION_BACKENDS = ("torch_native", "intel_amx")
CPU_LIB_DIR = "/usr/local/libexec/sglang/cpu-lib"  # sglang_serve_cpu_lib_dir's default
# Options that carry a secret: never on a command line (the role's --config file holds them).
SECRET_OPTIONS = ("--api-key", "--admin-api-key")


class ServeConfigError(AnsibleFilterError):  # type: ignore[misc,valid-type]
    """Invalid sglang_serve input; the message names the variable."""


def probe_host(host: str) -> str:
    """Address the readiness check connects to for a server bound to ``host``."""
    if host in ("0.0.0.0", ""):
        return "127.0.0.1"
    if host == "::":
        return "::1"
    return host


def _is_int(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _as_int(value: Any, where: str) -> int:
    if _is_int(value):
        return int(value)
    if isinstance(value, str) and value.strip().lstrip("-").isdigit():
        return int(value)
    raise ServeConfigError(f"{where} must be an integer, got {value!r}")


def _check_text(value: Any, where: str) -> str:
    if not isinstance(value, str):
        raise ServeConfigError(f"{where} must be a string, got {value!r}")
    if "\n" in value or "\r" in value:
        raise ServeConfigError(f"{where} must not contain a line break")
    return value


def _as_bool(value: Any, where: str) -> bool:
    """A boolean setting as Ansible's ``bool`` filter reads it ("false" from -e is false); null
    is false, as that filter has it."""
    if value is None:
        return False
    try:
        return boolean(value, strict=True)
    except TypeError:
        raise ServeConfigError(f"{where} must be a boolean, got {value!r}") from None


def role_settings(variables: Mapping[str, Any]) -> dict[str, Any]:
    """The settings (SETTINGS) from the role's variables (``sglang_serve_<key>``; ``variables``
    may be Ansible's lazy ``vars``: only these are read), booleans converted."""
    settings = {}
    for key, kind in SETTINGS.items():
        value = variables.get(f"sglang_serve_{key}")
        settings[key] = _as_bool(value, f"sglang_serve_{key}") if kind == "bool" else value
    return settings


def _setting(settings: Mapping[str, Any], instance: Mapping[str, Any], key: str) -> tuple[Any, str]:
    """Value of ``key`` for ``instance`` and the name of the variable it came from."""
    if key in instance and instance[key] is not None:
        where = f"{instance['__where']}.{key}"
        value = instance[key]
        return (_as_bool(value, where) if SETTINGS.get(key) == "bool" else value), where
    return settings.get(key), f"sglang_serve_{key}"


def _in_store(
    settings: Mapping[str, Any], path: str, where: str = "sglang_serve_model_path"
) -> str:
    """A relative model path is a directory in the model store; it must stay inside it.

    ``..`` that leaves the store, or an absolute path elsewhere, is refused unless
    ``sglang_serve_allow_model_outside_store`` is true.
    """
    store = posixpath.normpath(str(settings.get("model_store") or "/srv/models"))
    joined = path if path.startswith("/") else f"{store}/{path}"
    resolved = posixpath.normpath(joined)
    inside = resolved == store or resolved.startswith(store.rstrip("/") + "/")
    if not inside and not settings.get("allow_model_outside_store"):
        raise ServeConfigError(
            f"{where} = {path!r} resolves to {resolved}, outside the model store {store}: "
            "use a directory inside sglang_serve_model_store, or set "
            "sglang_serve_allow_model_outside_store: true"
        )
    if path.startswith("/"):
        return resolved
    return f"{store.rstrip('/')}/{posixpath.normpath(path)}" if inside else resolved


def _raw_instances(settings: Mapping[str, Any], gpu_count: int) -> list[dict[str, Any]]:
    explicit = settings.get("instances") or []
    if not isinstance(explicit, Sequence) or isinstance(explicit, str):
        raise ServeConfigError("sglang_serve_instances must be a list of instances")
    if explicit:
        raws = []
        for index, item in enumerate(explicit):
            where = f"sglang_serve_instances[{index}]"
            if not isinstance(item, Mapping):
                raise ServeConfigError(f"{where} must be a mapping with name and gpus")
            unknown = sorted(set(item) - set(INSTANCE_KEYS))
            if unknown:
                hints = [
                    f"{key} -> {close[0]}"
                    for key in unknown
                    if (close := difflib.get_close_matches(str(key), sorted(INSTANCE_KEYS), 1, 0.6))
                ]
                raise ServeConfigError(
                    f"{where}: unknown keys {', '.join(unknown)}"
                    + (f" (did you mean {', '.join(hints)}?)" if hints else "")
                    + f" (allowed: {', '.join(sorted(INSTANCE_KEYS))})"
                )
            cpu = _device(settings, item, where) == "cpu"
            if "name" not in item or ("gpus" not in item and not cpu):
                raise ServeConfigError(
                    f"{where} needs both 'name' and 'gpus' (a CPU instance, device: cpu, "
                    "needs only 'name')"
                )
            raw = dict(item)
            raw["__where"] = f"{where} ({item['name']})"
            raw["__index"] = index
            raws.append(raw)
        return raws
    if _device(settings, {}, "sglang_serve_device") == "cpu":
        raise ServeConfigError(
            "sglang_serve_device = cpu needs explicit sglang_serve_instances (name, optional "
            "port), with no GPUs: per-GPU mode has no GPUs to count on a CPU"
        )
    gpus = settings.get("gpus") or list(range(gpu_count))
    if not gpus:
        raise ServeConfigError(
            "no GPU found on this host (sglang_serve_gpu_count = 0) and no "
            "sglang_serve_instances given; set sglang_serve_enabled: false on hosts without GPUs"
        )
    raws = []
    for gpu in gpus:
        index = _as_int(gpu, "sglang_serve_gpus entries")
        raws.append(
            {"name": f"gpu{index}", "gpus": [index], "__where": f"sglang_serve_gpus ({gpu})"}
        )
    return raws


def _device(settings: Mapping[str, Any], item: Mapping[str, Any], where: str) -> str:
    """``cuda`` or ``cpu``: the instance's ``device``, else ``sglang_serve_device``."""
    value = item.get("device") if item.get("device") is not None else settings.get("device")
    var = f"{where}.device" if item.get("device") is not None else "sglang_serve_device"
    device = value or "cuda"
    if device not in DEVICES:
        raise ServeConfigError(f"{var} must be one of {', '.join(DEVICES)}, got {device!r}")
    return str(device)


def _stub_dirs(settings: Mapping[str, Any]) -> set[str]:
    """Folders that hold the toolkit's libcuda stub (its own and the private one)."""
    dirs = {posixpath.normpath(str(settings.get("cpu_lib_dir") or CPU_LIB_DIR))}
    stub = settings.get("cpu_libcuda_stub")
    if stub:
        dirs.add(posixpath.dirname(posixpath.normpath(str(stub))))
    return dirs


def _check_no_stub(
    settings: Mapping[str, Any], raw: Mapping[str, Any], env: Mapping[str, str]
) -> None:
    """A GPU instance must never see the libcuda stub: it would hide the driver's libcuda.so.1."""
    stubs = _stub_dirs(settings)
    for key in ("LD_LIBRARY_PATH", "LD_PRELOAD"):
        for entry in str(env.get(key, "")).replace(" ", ":").split(":"):
            if not entry:
                continue
            path = posixpath.normpath(entry)
            folder = path if key == "LD_LIBRARY_PATH" else posixpath.dirname(path)
            if folder in stubs or "stubs" in path.split("/"):
                where = (
                    f"{raw['__where']}.env" if key in (raw.get("env") or {}) else "sglang_serve_env"
                )
                raise ServeConfigError(
                    f"{where}: {key} = {env[key]} holds the libcuda stub ({entry}) on a GPU "
                    "instance: on a GPU host it would hide the driver's libcuda.so.1. Remove it; "
                    "only CPU instances (device: cpu) get the stub, in their own folder"
                )


def _eagle3_args(settings: Mapping[str, Any], raw: Mapping[str, Any]) -> list[str]:
    values = {key: _setting(settings, raw, key) for key in EAGLE3_KEYS}
    given = [key for key, (value, _var) in values.items() if value not in (None, "")]
    if not given:
        return []
    missing = [values[key][1] for key in EAGLE3_KEYS if key not in given]
    if missing:
        have = ", ".join(values[key][1] for key in given)
        raise ServeConfigError(
            f"EAGLE-3 settings are all or nothing: {have} set but {', '.join(missing)} missing"
        )
    draft, draft_var = values["eagle3_draft_model_path"]
    path = _in_store(settings, _check_text(draft, draft_var), draft_var)
    numbers = []
    for key in EAGLE3_KEYS[1:]:
        value, where = values[key]
        number = _as_int(value, where)
        if number < 1:
            raise ServeConfigError(f"{where} must be at least 1, got {number}")
        numbers.append(str(number))
    return [
        "--speculative-algorithm",
        "EAGLE3",
        "--speculative-draft-model-path",
        path,
        "--speculative-num-steps",
        numbers[0],
        "--speculative-eagle-topk",
        numbers[1],
        "--speculative-num-draft-tokens",
        numbers[2],
    ]


class _Argv:
    """A command line and, per argument, the variable it came from (for error messages)."""

    def __init__(self) -> None:
        self.argv: list[str] = []
        self.argv_from: list[str] = []

    def add(self, source: str, *args: str) -> None:
        self.argv.extend(args)
        self.argv_from.extend([source] * len(args))


def _check_name(raw: Mapping[str, Any]) -> str:
    name = raw["name"]
    if not isinstance(name, str) or not INSTANCE_NAME.match(name):
        raise ServeConfigError(
            f"{raw['__where']}: instance name {name!r} must match {INSTANCE_NAME.pattern} "
            "(it becomes the systemd instance sglang@<name>)"
        )
    return name


def _gpus(raw: Mapping[str, Any], gpu_count: int, cpu: bool, device_var: str) -> list[int]:
    """The instance's GPU indexes: none on a CPU instance, else distinct ones this host has."""
    where = raw["__where"]
    gpus_value = raw.get("gpus")
    if cpu and gpus_value not in (None, [], ""):
        raise ServeConfigError(
            f"{where}: a CPU instance ({device_var} = cpu) takes no GPUs, got gpus "
            f"{gpus_value!r}: remove its gpus, or serve it with device: cuda"
        )
    if cpu:
        gpus_value = []
    elif _is_int(gpus_value):
        gpus_value = [gpus_value]
    if not cpu and (
        not isinstance(gpus_value, Sequence) or isinstance(gpus_value, str) or not gpus_value
    ):
        raise ServeConfigError(f"{where}.gpus must be a non-empty list of GPU indexes")
    gpus = [_as_int(g, f"{where}.gpus") for g in gpus_value]
    for gpu in gpus:
        if gpu < 0 or gpu >= gpu_count:
            have = f"0-{gpu_count - 1}" if gpu_count else "none"
            raise ServeConfigError(
                f"{where}: GPU index {gpu} is not on this host "
                f"(sglang_serve_gpu_count = {gpu_count}, indexes {have})"
            )
    if len(set(gpus)) != len(gpus):
        raise ServeConfigError(f"{where}.gpus lists a GPU twice: {gpus}")
    return gpus


def _tp(raw: Mapping[str, Any], gpus: list[int], cpu: bool) -> int:
    """Tensor-parallel size: ``tp``, else one rank per GPU; it must divide the GPUs."""
    where = raw["__where"]
    tp = _as_int(raw.get("tp", len(gpus) or 1), f"{where}.tp")
    if tp < 1 or (not cpu and len(gpus) % tp):
        raise ServeConfigError(f"{where}.tp = {tp} must divide the {len(gpus)} GPUs it is given")
    return tp


def _port(settings: Mapping[str, Any], raw: Mapping[str, Any], gpus: list[int], cpu: bool) -> int:
    """``port``, else the port base plus the first GPU's index."""
    where = raw["__where"]
    base = _as_int(settings.get("port_base", 30000), "sglang_serve_port_base")
    # a CPU instance without a port takes the base + its place in sglang_serve_instances
    first = raw.get("__index", 0) if cpu else gpus[0]
    port = _as_int(raw.get("port", base + first), f"{where}.port")
    if not 1 <= port <= 65535:
        raise ServeConfigError(f"{where}: port {port} outside 1-65535 (sglang_serve_port_base?)")
    return port


def _host(settings: Mapping[str, Any], raw: Mapping[str, Any], has_key: bool) -> tuple[str, str]:
    """The bind address and its variable; beyond loopback only with an API key (or consent)."""
    host, host_var = _setting(settings, raw, "host")
    host = _check_text(host or "127.0.0.1", host_var)
    if not is_loopback(host) and not has_key and not settings.get("allow_insecure_bind"):
        raise ServeConfigError(
            f"{host_var} = {host} is not a loopback address and sglang_serve_api_key is empty: "
            "set sglang_serve_api_key (from a vault) or sglang_serve_allow_insecure_bind: true"
        )
    return host, host_var


def _model(settings: Mapping[str, Any], raw: Mapping[str, Any]) -> tuple[str, str, str, str]:
    """The model path (in the store) and the served name (else the path's last part), each with
    its variable."""
    model_path, model_var = _setting(settings, raw, "model_path")
    if not model_path:
        raise ServeConfigError(f"{model_var} must be set (the model to serve)")
    model_path = _in_store(settings, _check_text(model_path, model_var), model_var)
    served, served_var = _setting(settings, raw, "served_model_name")
    served = _check_text(served or model_path.rstrip("/").rsplit("/", 1)[-1], served_var)
    return model_path, model_var, served, served_var


def _backend(
    settings: Mapping[str, Any], raw: Mapping[str, Any], cpu: bool, device_var: str
) -> tuple[Any, str]:
    """The attention backend as given (unset: none) and its variable.

    Unset (the default): no flag, SGLang picks for the model and the GPU
    (ServerArgs._get_default_attn_backend), and on a CPU instance ServerArgs._handle_cpu_backends
    picks intel_amx, which falls back to torch_native without AMX or sgl-kernel's CPU ops
    (srt/server_args.py:1266-1271, 2809-2818 of SGLang 0.5.12). A value set is passed as given.
    """
    backend, backend_var = _setting(settings, raw, "attention_backend")
    if cpu and backend and backend not in CPU_ATTENTION_BACKENDS:
        raise ServeConfigError(
            f"{backend_var} = {backend} does not run on a CPU instance "
            f"({device_var} = cpu): it needs a GPU. Fix: set {backend_var} to one of "
            f"{', '.join(CPU_ATTENTION_BACKENDS)} (torch_native runs on any CPU), or leave it "
            "unset: SGLang then picks one itself"
        )
    return backend, backend_var


def _tuning_args(settings: Mapping[str, Any], raw: Mapping[str, Any], args: _Argv) -> None:
    """Memory fraction, context length, multithreaded loading, metrics, sleep on idle."""
    fraction, fraction_var = _setting(settings, raw, "mem_fraction_static")
    if fraction not in (None, ""):
        try:
            value = float(fraction)
        except (TypeError, ValueError):
            raise ServeConfigError(f"{fraction_var} must be a number, got {fraction!r}") from None
        if not 0.0 < value < 1.0:
            raise ServeConfigError(f"{fraction_var} = {value} must be inside (0, 1)")
        args.add(fraction_var, "--mem-fraction-static", repr(value))

    context, context_var = _setting(settings, raw, "context_length")
    if context not in (None, "", 0):
        length = _as_int(context, context_var)
        if length < 1:
            raise ServeConfigError(f"{context_var} must be positive, got {length}")
        args.add(context_var, "--context-length", str(length))

    multithread, multithread_var = _setting(settings, raw, "multithread_load")
    if multithread:
        threads_value, threads_var = _setting(settings, raw, "multithread_load_threads")
        threads = _as_int(threads_value or 16, threads_var)
        if threads < 1:
            raise ServeConfigError(f"{threads_var} must be at least 1, got {threads}")
        config = {"enable_multithread_load": True, "num_threads": threads}
        args.add(multithread_var, "--model-loader-extra-config", json.dumps(config))

    metrics, metrics_var = _setting(settings, raw, "enable_metrics")
    if metrics:
        args.add(metrics_var, "--enable-metrics")

    sleep, sleep_var = _setting(settings, raw, "sleep_on_idle")
    if sleep:
        args.add(sleep_var, "--sleep-on-idle")


def _extra_args(settings: Mapping[str, Any], raw: Mapping[str, Any], args: _Argv) -> None:
    """``extra_args`` as given; no secret and no ``--config`` anywhere on the command line."""
    extra, extra_var = _setting(settings, raw, "extra_args")
    extra = extra or []
    if isinstance(extra, str) or not isinstance(extra, Sequence):
        raise ServeConfigError(f"{extra_var} must be a list of strings (one argument each)")
    args.add(extra_var, *[_check_text(arg, f"{extra_var} entries") for arg in extra])
    for secret in SECRET_OPTIONS:
        if any(arg == secret or arg.startswith(secret + "=") for arg in args.argv):
            raise ServeConfigError(
                f"{extra_var} must not carry {secret}: a secret on the command line is readable "
                "in /proc/<pid>/cmdline; use sglang_serve_api_key (written to the instance's "
                "--config file)"
            )
    if any(arg == "--config" or arg.startswith("--config=") for arg in args.argv):
        raise ServeConfigError(
            f"{extra_var} must not carry --config: the role passes each instance's own config "
            "file, and SGLang takes only one"
        )


def _device_nodes(gpus: list[int], cpu: bool) -> list[str]:
    """The /dev nodes a GPU instance needs (a CPU instance: none)."""
    if cpu:
        return []
    return [f"/dev/nvidia{gpu}" for gpu in gpus] + [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]


def _resolve(
    settings: Mapping[str, Any], raw: Mapping[str, Any], gpu_count: int, has_key: bool
) -> dict[str, Any]:
    """One instance, checked and resolved; the checks run in a fixed order, first problem wins."""
    where = raw["__where"]
    name = _check_name(raw)
    device = _device(settings, raw, where)
    device_var = f"{where}.device" if raw.get("device") is not None else "sglang_serve_device"
    cpu = device == "cpu"
    gpus = _gpus(raw, gpu_count, cpu, device_var)
    tp = _tp(raw, gpus, cpu)
    port = _port(settings, raw, gpus, cpu)
    host, host_var = _host(settings, raw, has_key)
    model_path, model_var, served, served_var = _model(settings, raw)
    backend, backend_var = _backend(settings, raw, cpu, device_var)

    args = _Argv()
    args.add(model_var, "--model-path", model_path)
    args.add(served_var, "--served-model-name", served)
    args.add(host_var, "--host", host)
    port_var = f"{where}.port" if "port" in raw else "sglang_serve_port_base"
    args.add(port_var, "--port", str(port))
    explicit = where.startswith("sglang_serve_instances[")
    tp_var = f"{where}.tp" if "tp" in raw else f"{where}.gpus" if explicit else "sglang_serve_gpus"
    args.add(tp_var, "--tp", str(tp))
    if cpu:
        args.add(device_var, "--device", "cpu")
    if backend:
        args.add(backend_var, "--attention-backend", _check_text(backend, backend_var))
    _tuning_args(settings, raw, args)
    args.add(_setting(settings, raw, "eagle3_draft_model_path")[1], *_eagle3_args(settings, raw))
    _extra_args(settings, raw, args)

    return {
        "name": name,
        "unit": f"sglang@{name}.service",
        "device": device,
        "gpus": gpus,
        "tp": tp,
        "port": port,
        "host": host,
        "probe_host": probe_host(host),
        "model_path": model_path,
        "served_model_name": served,
        "argv": args.argv,
        "argv_from": args.argv_from,
        "env": _environment(settings, raw, gpus, cpu),
        "devices": _device_nodes(gpus, cpu),
    }


def _environment(
    settings: Mapping[str, Any], raw: Mapping[str, Any], gpus: list[int], cpu: bool = False
) -> dict[str, str]:
    cache = str(settings.get("cache_dir") or "/var/cache/sglang")
    # Compiled kernels are tied to the CUDA version they were built with (a CUDA 13 flashinfer
    # cache reused under 12.9 fails: flashinfer issue 5145), so one JIT cache per CUDA version.
    cuda = str(settings.get("cuda_version") or "")
    if cuda and not re.fullmatch(r"[0-9]+\.[0-9]+", cuda):
        raise ServeConfigError(f"sglang_serve_cuda_version must be major.minor, got {cuda!r}")
    jit = f"{cache}/cuda-{cuda}" if cuda else cache
    env: dict[str, str] = {
        "CUDA_DEVICE_ORDER": "PCI_BUS_ID",
        "CUDA_VISIBLE_DEVICES": ",".join(str(g) for g in gpus),
        "HOME": str(settings.get("home") or "/var/lib/sglang"),
        "XDG_CACHE_HOME": cache,
        "HF_HOME": f"{cache}/huggingface",
        "FLASHINFER_WORKSPACE_BASE": jit,
        "TRITON_CACHE_DIR": f"{jit}/triton",
        "TORCH_EXTENSIONS_DIR": f"{jit}/torch_extensions",
        "TORCHINDUCTOR_CACHE_DIR": f"{jit}/torchinductor",
        "CUDA_CACHE_PATH": f"{jit}/nv_compute",
        "PYTHONUNBUFFERED": "1",
    }
    if settings.get("hf_offline", True):
        env.update({"HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1"})
    for source, where in (
        # what the validate play's reading of the node's PCIe fabric calls for (NCCL_P2P_DISABLE
        # where ACS or the IOMMU redirects peer-to-peer traffic): the settings below win
        ((settings.get("fabric_env") or {}).get(raw["name"], {}), "sglang_serve_fabric_env"),
        (settings.get("env") or {}, "sglang_serve_env"),
        (raw.get("env") or {}, f"{raw['__where']}.env"),
    ):
        if not isinstance(source, Mapping):
            raise ServeConfigError(f"{where} must be a mapping of NAME: value")
        for key, value in source.items():
            if not isinstance(key, str) or not ENV_NAME.match(key):
                raise ServeConfigError(f"{where}: {key!r} is not a valid environment name")
            env[key] = _check_text(str(value), f"{where}.{key}")
    if not cpu:
        _check_no_stub(settings, raw, env)
        return env
    # SGLang's CPU engine (is_cpu() reads it); sgl_kernel's common_ops needs libcuda.so.1 to
    # import even on CPU, which the toolkit's stub, linked in this private folder, provides.
    private = posixpath.normpath(str(settings.get("cpu_lib_dir") or CPU_LIB_DIR))
    env["SGLANG_USE_CPU_ENGINE"] = "1"
    env["CUDA_VISIBLE_DEVICES"] = ""
    env["LD_LIBRARY_PATH"] = ":".join(p for p in (private, env.get("LD_LIBRARY_PATH", "")) if p)
    return env


def sglang_serve_instances(
    settings: Mapping[str, Any], gpu_count: Any, has_api_key: bool = False
) -> list[dict[str, Any]]:
    """Expand and check the instances; ``settings`` holds role variables minus the prefix."""
    unknown = sorted(set(settings) - set(SETTINGS))
    if unknown:
        raise ServeConfigError(f"sglang_serve_instances: unknown settings {', '.join(unknown)}")
    count = _as_int(gpu_count if gpu_count is not None else 0, "sglang_serve_gpu_count")
    if count < 0:
        raise ServeConfigError(f"sglang_serve_gpu_count must not be negative, got {count}")
    instances = [
        _resolve(settings, raw, count, bool(has_api_key)) for raw in _raw_instances(settings, count)
    ]
    seen_names: dict[str, str] = {}
    seen_ports: dict[int, str] = {}
    seen_gpus: dict[int, str] = {}
    for instance in instances:
        name = instance["name"]
        if name in seen_names:
            raise ServeConfigError(f"sglang_serve_instances: two instances are named {name}")
        seen_names[name] = name
        port = instance["port"]
        if port in seen_ports:
            raise ServeConfigError(
                f"sglang_serve_instances: instances {seen_ports[port]} and {name} "
                f"both use port {port}"
            )
        seen_ports[port] = name
        for gpu in instance["gpus"]:
            if gpu in seen_gpus:
                raise ServeConfigError(
                    f"sglang_serve_instances: GPU {gpu} is given to both {seen_gpus[gpu]} and "
                    f"{name}; give a tensor-parallel group one instance with all its GPUs"
                )
            seen_gpus[gpu] = name
    return instances


def sglang_serve_deployed(instances: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The instances as deployed, for the deploy record: without ``argv_from`` (where each
    argument came from), so explicit instances equal to the per-GPU default keep the record."""
    return [{k: v for k, v in i.items() if k != "argv_from"} for i in instances]


def sglang_serve_endpoints(instances: Sequence[Mapping[str, Any]]) -> list[str]:
    """Worker URLs of resolved instances, for a router in front of them."""
    urls = []
    for instance in instances:
        host = instance["probe_host"]
        if ":" in host:
            host = f"[{host}]"
        urls.append(f"http://{host}:{instance['port']}")
    return urls


def sglang_serve_describe(instance: Mapping[str, Any]) -> str:
    """One line per instance: unit, GPUs, address, model."""
    gpus = ",".join(str(g) for g in instance["gpus"])
    where = "CPU" if instance.get("device") == "cpu" else f"GPU {gpus}"
    return (
        f"{instance['unit']}: {where} (tp {instance['tp']}), "
        f"{instance['host']}:{instance['port']}, {instance['served_model_name']}"
    )
