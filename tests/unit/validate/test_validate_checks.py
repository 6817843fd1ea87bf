"""The validation pass (plugins/plugin_utils/validate_*.py): one test per mistake class.

Each case is one realistic inventory mistake. The check must report it as a problem whose first
words are the host, that names the variable, and that carries the fix.
"""

from __future__ import annotations

import subprocess
import textwrap
from pathlib import Path

import jinja2
import pytest
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_common import (
    PLAY_LEVEL_VARS,
    is_runtime_undefined,
    spec_problems,
    template_error_problem,
    unknown_variables_by_host,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_containers import (
    clone_problems,
    container_problems,
    cross_node_problems,
    parse_node_state,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_controller import (
    controller_problems,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_declared import (
    declared_names,
    play_role_vars,
    role_defaults,
    role_specs,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_router import (
    router_problems,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_serving import (
    drain_problems,
    missing_play_vars,
    play_level_problems,
    required_play_vars,
    serve_problems,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_stack import (
    stack_problems,
)

from tests.loaders import ROOT

# The node as the lab's node-state script prints it: 2 cores, 24 GiB, no GPU (or 8 with GPUS),
# bridge lxcbr0 10.0.3.1/24, one template, CT 200 "ct200" at 10.0.3.200.
NODE_STATE = textwrap.dedent(
    """\
    ## nproc
    2
    ## meminfo
    MemTotal:       24683584 kB
    ## gpus
    ## addresses
    1: lo    inet 127.0.0.1/8 scope host lo\\       valid_lft forever preferred_lft forever
    5: lxcbr0    inet 10.0.3.1/24 scope global lxcbr0\\       valid_lft forever
    ## templates
    debian-12-lab.tar.zst
    ## pct list
    VMID       Status     Lock      Name
    200        running              ct200
    ## config 200
    arch: amd64
    cores: 2
    hostname: ct200
    memory: 4096
    net0: name=eth0,bridge=lxcbr0,ip=10.0.3.200/24,gw=10.0.3.1,hwaddr=BC:24:11:07:34:95,type=veth
    """
)
GPUS = "## gpus\nnvidia0\nnvidia1\nnvidiactl\nnvidia-uvm\n"
DEFAULTS = {
    "template": "local:vztmpl/debian-12-lab.tar.zst",
    "cores": 2,
    "memory": 4096,
    "swap": 0,
    "rootfs_storage": "local",
    "rootfs_size": 16,
    "bridge": "lxcbr0",
    "ip": "dhcp",
    "unprivileged": False,
    "onboot": False,
    "features": {"nesting": True},
    "mounts": [],
    "gpus": "none",
    "gpu_required": False,
    "groups": ["sglang_servers"],
    "host_vars": {},
}
SPECS = role_specs()
CT_OPTIONS = SPECS["proxmox_lxc"]["proxmox_lxc_containers"]["options"]
DECLARED = declared_names()


def state(gpus: bool = False) -> dict:
    text = NODE_STATE.replace("## gpus\n", GPUS) if gpus else NODE_STATE
    parsed = parse_node_state(text)
    parsed["templates_dir"] = "/var/lib/vz/template/cache"
    return parsed


def ct(num: int, **kw) -> dict:
    return {"name": f"ct{num}", "vmid": num, "ip": f"10.0.3.{num}/24", "gateway": "10.0.3.1", **kw}


def containers(*cts, gpus=False, recreate=(), live=True, node="pve1") -> list[str]:
    found, _ = container_problems(
        node, list(cts), DEFAULTS, state(gpus) if live else None, 512, list(recreate), CT_OPTIONS
    )
    return found


# CT 260 "golden", made a template (pct template): what a node's config folder then holds
GOLDEN = "## config 260\nhostname: golden\nrootfs: local:base-260-disk-0,size=16G\ntemplate: 1\n"


def cloned(*cts, pve1=GOLDEN, pve2="") -> list[str]:
    """Problems of pve1's specs with pve1 and pve2 live (pve2: CT 300 "other" and ``pve2``)."""
    states = {"pve1": parse_node_state(NODE_STATE + pve1),
              "pve2": parse_node_state("## config 300\nhostname: other\n" + pve2)}
    states["pve1"]["templates_dir"] = "/var/lib/vz/template/cache"
    found, merged = container_problems("pve1", list(cts), DEFAULTS, states["pve1"], 512, [],
                                       CT_OPTIONS)
    return found + clone_problems(states, {"pve1": merged})


SERVE_BASE = {
    "sglang_serve_enabled": True,
    "sglang_serve_model_path": "Kimi-K2.5",
    "sglang_serve_model_store": "/srv/models",
    "sglang_serve_port_base": 30000,
    "sglang_serve_host": "127.0.0.1",
    "sglang_serve_instances": [],
    "sglang_serve_gpus": [],
    "sglang_serve_attention_backend": "flashinfer",
    "sglang_serve_extra_args": [],
    "sglang_serve_env": {},
}


def serve(gpu_count: int = 8, **kw) -> list[str]:
    found, _ = serve_problems("ct200", {**SERVE_BASE, **kw}, gpu_count)
    return found


def router(**kw) -> list[str]:
    _, instances = serve_problems("ct200", SERVE_BASE, 2)
    values = {"sglang_router_enabled": True, "sglang_router_host": "127.0.0.1",
              "sglang_router_port": 30080, **kw}
    return router_problems("ct200", values, instances)


def typed(var: str, value, role: str) -> list[str]:
    return spec_problems("ct200", var, value, SPECS[role][var])


def unknown(*names: str) -> list[str]:
    return unknown_variables_by_host({"ct200": list(names), "pve1": list(names)}, DECLARED)


# (id, problems, host, variable, words of the fix)
CASES = [
    # container specs, alone
    ("vmid-out-of-range", lambda: containers(ct(211, vmid=99), live=False),
     "pve1", "[ct211].vmid", "100..999999999"),
    ("vmid-twice", lambda: containers(ct(211), ct(212, vmid=211), live=False),
     "pve1", "[ct212].vmid", "also used by ct211"),
    ("address-twice", lambda: containers(ct(211), ct(212, ip="10.0.3.211/24"), live=False),
     "pve1", "[ct212].ip", "also used by ct211"),
    ("memory-below-floor", lambda: containers(ct(211, memory=128), live=False),
     "pve1", "[ct211].memory", "proxmox_lxc_memory_floor"),
    ("memory-as-string", lambda: containers(ct(211, memory="16G"), live=False),
     "pve1", "[ct211].memory", "must be an integer number of MiB, got the string '16G'"),
    ("cores-zero", lambda: containers(ct(211, cores=0), live=False),
     "pve1", "[ct211].cores", "give it 1 or more"),
    ("cores-as-word", lambda: containers(ct(211, cores="many"), live=False),
     "pve1", "[ct211].cores", "write cores: 4"),
    ("hostname-shell-metachars",
     lambda: containers(ct(211, hostname="ct211; rm -rf /"), live=False),
     "pve1", "[ct211].hostname", "RFC 1123"),
    ("hostname-too-long-label", lambda: containers(ct(211, hostname="a" * 64), live=False),
     "pve1", "[ct211].hostname", "use a name such as ct200"),
    ("gpu-listed-twice", lambda: containers(ct(211, gpus=[0, 0]), live=False),
     "pve1", "[ct211].gpus", "list each GPU index once"),
    ("gpus-wrong-shape", lambda: containers(ct(211, gpus="0,1"), live=False),
     "pve1", "[ct211].gpus", "a list of GPU indexes"),
    ("mounts-as-mapping", lambda: containers(ct(211, mounts={"host_path": "/a", "path": "/b"}),
                                             live=False),
     "pve1", "[ct211].mounts", "write each mount as '- host_path: ...'"),
    ("mount-relative-path",
     lambda: containers(ct(211, mounts=[{"host_path": "data", "path": "/b"}]), live=False),
     "pve1", "[ct211].mounts.host_path", "absolute path"),
    ("mount-unknown-key", lambda: containers(ct(211, mounts=[{"host_path": "/a", "path": "/b",
                                                              "readonly": True}]), live=False),
     "pve1", "[ct211].mounts[0].readonly", "did you mean read_only?"),
    ("container-unknown-key", lambda: containers(ct(211, coress=2), live=False),
     "pve1", "proxmox_lxc_containers[ct211].coress", "did you mean cores?"),
    ("container-missing-vmid", lambda: containers({"name": "ct211"}, live=False),
     "pve1", "proxmox_lxc_containers[ct211].vmid", "add vmid"),
    ("ip-without-prefix", lambda: containers(ct(211, ip="10.0.3.211"), live=False),
     "pve1", "[ct211].ip", "address/prefix"),
    ("containers-not-a-list",
     lambda: container_problems("pve1", {"ct211": {"vmid": 211}}, DEFAULTS, None)[0],
     "pve1", "proxmox_lxc_containers", "one '- name: ...' entry per container"),
    # container specs against the live node
    ("more-cores-than-node", lambda: containers(ct(211, cores=64)),
     "pve1", "[ct211].cores", "set cores to 2 or fewer"),
    ("more-memory-than-node", lambda: containers(ct(211, memory=491520)),
     "pve1", "[ct211].memory", "at most 24105"),
    ("gpu-not-on-node", lambda: containers(ct(211, gpus=[5]), gpus=True),
     "pve1", "[ct211].gpus", "GPU 5 not on pve1 (it has: 0, 1)"),
    ("gpu-required-without-gpu", lambda: containers(ct(211, gpu_required=True, gpus="all")),
     "pve1", "[ct211].gpu_required", "set gpu_required: false"),
    ("vmid-held-by-other-container", lambda: containers(ct(211, vmid=200)),
     "pve1", "[ct211].vmid", "proxmox_lxc_recreate"),
    ("hostname-in-use-on-node", lambda: containers(ct(211, hostname="ct200")),
     "pve1", "[ct211].hostname", "choose another hostname"),
    ("address-in-use-on-node", lambda: containers(ct(211, ip="10.0.3.200/24")),
     "pve1", "[ct211].ip", "already used by CT 200 (ct200)"),
    ("address-outside-bridge-subnet", lambda: containers(ct(211, ip="10.0.4.211/24")),
     "pve1", "[ct211].ip", "allow_ip_outside_bridge: true"),
    ("gateway-outside-bridge-subnet", lambda: containers(ct(211, gateway="10.0.9.1")),
     "pve1", "[ct211].gateway", "use the gateway of 10.0.3.0/24"),
    ("bridge-missing-on-node", lambda: containers(ct(211, bridge="vmbr7")),
     "pve1", "[ct211].bridge", "create the bridge on pve1"),
    ("template-missing", lambda: containers(ct(211, template="local:vztmpl/none.tar.zst")),
     "pve1", "[ct211].template",
     "/var/lib/vz/template/cache/none.tar.zst not found on pve1. Fix: download it with "
     "`pveam download local none.tar.zst`"),
    # clones of templates (clone_from)
    ("clone-from-a-container-not-a-template", lambda: cloned(ct(211, clone_from=200)),
     "pve1", "[ct211].clone_from", "make it one first"),
    ("clone-from-a-template-on-another-node",
     lambda: cloned(ct(211, clone_from=260), pve1="", pve2=GOLDEN.replace("260", "270")
                    .replace("## config 270", "## config 260")),
     "pve1", "[ct211].clone_from", "move this container's spec to pve2's proxmox_lxc_containers"),
    ("clone-from-no-such-container", lambda: cloned(ct(211, clone_from=280)),
     "pve1", "[ct211].clone_from", "converge a container on pve1 and make it a template"),
    ("clone-from-its-own-vmid", lambda: containers(ct(211, clone_from=211), live=False),
     "pve1", "[ct211].clone_from", "give the clone a vmid of its own"),
    ("vmid-held-by-a-template", lambda: cloned(ct(260, hostname="golden")),
     "pve1", "[ct260].vmid", "clone it from the template with clone_from: 260"),
    ("vmid-taken-on-another-node", lambda: cloned(ct(300, clone_from=260)),
     "pve1", "[ct300].vmid", "pick a vmid that no node of the cluster uses"),
    ("recreate-unknown-name", lambda: cross_node_problems(["pve1"], [ct(211)], ["ct999"]),
     "controller", "proxmox_lxc_recreate", "not a container in the inventory"),
    ("vmid-twice-across-nodes",
     lambda: cross_node_problems(["pve1", "pve2"], [ct(211), ct(212, vmid=211)], []),
     "all nodes", "[ct212].vmid", "also used by ct211"),
    # unknown variables and types
    ("misspelled-role-variable", lambda: unknown("sglang_serve_instnaces"),
     "ct200, pve1", "sglang_serve_instnaces", "did you mean sglang_serve_instances?"),
    ("misspelled-node-variable", lambda: unknown("proxmox_lxc_container"),
     "ct200, pve1", "proxmox_lxc_container", "did you mean proxmox_lxc_containers?"),
    ("port-as-word", lambda: typed("sglang_serve_port_base", "abc", "sglang_serve"),
     "ct200", "sglang_serve_port_base", "must be an integer, got the string 'abc'"),
    ("bool-as-word", lambda: typed("sglang_router_enabled", "maybe", "sglang_router"),
     "ct200", "sglang_router_enabled", "must be true or false"),
    ("choice-misspelled", lambda: typed("cuda_toolkit_source", "wheel", "cuda_toolkit"),
     "ct200", "cuda_toolkit_source", "did you mean wheels?"),
    ("list-given-a-string", lambda: typed("sglang_serve_extra_args", "--foo bar", "sglang_serve"),
     "ct200", "sglang_serve_extra_args", "must be a list"),
    # serving
    ("model-path-leaves-store", lambda: serve(sglang_serve_model_path="../../etc"),
     "ct200", "sglang_serve_model_path", "sglang_serve_allow_model_outside_store: true"),
    ("model-path-absolute-elsewhere", lambda: serve(sglang_serve_model_path="/etc"),
     "ct200", "sglang_serve_model_path", "outside the model store /srv/models"),
    ("draft-path-leaves-store",
     lambda: serve(sglang_serve_eagle3_draft_model_path="../secret",
                   sglang_serve_eagle3_num_steps=3, sglang_serve_eagle3_topk=1,
                   sglang_serve_eagle3_num_draft_tokens=4),
     "ct200", "sglang_serve_eagle3_draft_model_path", "inside sglang_serve_model_store"),
    ("eagle3-half-set", lambda: serve(sglang_serve_eagle3_draft_model_path="draft"),
     "ct200", "sglang_serve_eagle3_num_steps", "all or nothing"),
    ("instance-unknown-key",
     lambda: serve(sglang_serve_instances=[{"name": "tp8", "gpus": [0, 1], "prot": 30000}]),
     "ct200", "sglang_serve_instances[0]", "did you mean prot -> port?"),
    ("gpu-in-two-instances",
     lambda: serve(sglang_serve_instances=[{"name": "a", "gpus": [0, 1]},
                                           {"name": "b", "gpus": [1, 2], "port": 30005}]),
     "ct200", "sglang_serve_instances", "give a tensor-parallel group one instance"),
    ("tp-does-not-divide",
     lambda: serve(sglang_serve_instances=[{"name": "a", "gpus": [0, 1, 2], "tp": 2}]),
     "ct200", "sglang_serve_instances[0] (a).tp", "must divide the 3 GPUs"),
    ("instance-gpu-not-on-host",
     lambda: serve(2, sglang_serve_instances=[{"name": "a", "gpus": [3]}]),
     "ct200", "sglang_serve_instances[0] (a)", "GPU index 3 is not on this host"),
    # CPU serving (sglang_serve_device: cpu)
    ("cpu-instance-with-gpus",
     lambda: serve(sglang_serve_device="cpu", sglang_serve_attention_backend="torch_native",
                   sglang_serve_instances=[{"name": "c", "gpus": [0]}]),
     "ct200", "sglang_serve_instances[0] (c)", "remove its gpus"),
    ("cpu-instance-gpu-only-backend",
     lambda: serve(sglang_serve_device="cpu", sglang_serve_instances=[{"name": "c"}]),
     "ct200", "sglang_serve_attention_backend", "set sglang_serve_attention_backend to one of"),
    ("cpu-per-gpu-mode",
     lambda: serve(None, sglang_serve_device="cpu", sglang_serve_attention_backend="torch_native"),
     "ct200", "sglang_serve_device", "needs explicit sglang_serve_instances"),
    ("stub-on-gpu-instance",
     lambda: serve(sglang_serve_env={
         "LD_LIBRARY_PATH": "/opt/sglang/cuda/current/nvidia/cu13/lib/stubs"}),
     "ct200", "sglang_serve_env", "would hide the driver"),
    ("private-stub-folder-on-gpu-instance",
     lambda: serve(sglang_serve_instances=[{"name": "g", "gpus": [0], "env": {
         "LD_LIBRARY_PATH": "/usr/local/libexec/sglang/cpu-lib"}}]),
     "ct200", "sglang_serve_instances[0] (g).env", "only CPU instances"),
    ("ports-collide",
     lambda: serve(sglang_serve_instances=[{"name": "a", "gpus": [0], "port": 30000},
                                           {"name": "b", "gpus": [1], "port": 30000}]),
     "ct200", "sglang_serve_instances", "both use port 30000"),
    ("public-bind-without-key", lambda: serve(sglang_serve_host="0.0.0.0"),
     "ct200", "sglang_serve_host", "set sglang_serve_api_key"),
    ("extra-args-line-break", lambda: serve(sglang_serve_extra_args=["--a\n--b"]),
     "ct200", "sglang_serve_extra_args", "must not contain a line break"),
    ("api-key-in-extra-args", lambda: serve(sglang_serve_extra_args=["--api-key", "x"]),
     "ct200", "sglang_serve_extra_args", "use sglang_serve_api_key"),
    ("router-port-is-a-worker-port", lambda: router(sglang_router_port=30000),
     "ct200", "sglang_router_port", "give the router a port no instance uses"),
    ("router-public-bind", lambda: router(sglang_router_host="0.0.0.0"),
     "ct200", "sglang_router_host", "sglang_router_allow_insecure_bind: true"),
    ("router-arg-for-systemd", lambda: router(sglang_router_extra_args=["--x", "$(id)"]),
     "ct200", "sglang_router_extra_args", "pass plain arguments"),
    ("router-policy-with-space", lambda: router(sglang_router_policy="round robin"),
     "ct200", "sglang_router_policy", "use a plain value"),
    ("router-metrics-on-router-port", lambda: router(sglang_router_prometheus_port=30080),
     "ct200", "sglang_router_prometheus_port", "the router itself uses it too"),
    ("router-metrics-on-worker-port", lambda: router(sglang_router_prometheus_port=30001),
     "ct200", "sglang_router_prometheus_port", "a port of its own"),
    ("router-metrics-port-range", lambda: router(sglang_router_prometheus_port=70000),
     "ct200", "sglang_router_prometheus_port", "outside 1-65535"),
    ("router-health-interval-zero", lambda: router(sglang_router_health_check_interval_secs=0),
     "ct200", "sglang_router_health_check_interval_secs", "1 or more"),
    ("router-cb-timeout-fraction", lambda: router(sglang_router_cb_timeout_duration_secs=2.5),
     "ct200", "sglang_router_cb_timeout_duration_secs", "1 or more"),
    ("router-health-endpoint-not-a-path",
     lambda: router(sglang_router_health_check_endpoint="health; rm"),
     "ct200", "sglang_router_health_check_endpoint", "a path such as /health"),
    ("gpus-expected-as-word",
     lambda: play_level_problems("ct200", {"sglang_lxc_gpus_expected": "eight"}),
     "ct200", "sglang_lxc_gpus_expected", "must be an integer number of GPUs"),
    ("model-store-relative",
     lambda: play_level_problems("ct200", {"sglang_lxc_model_store": "srv/models"}),
     "ct200", "sglang_lxc_model_store", "a path starting with /"),
    ("venv-path-unset",
     lambda: missing_play_vars("ct200", {}, required_play_vars(play_role_vars())),
     "ct200", "sglang_lxc_venv", "set sglang_lxc_venv in the inventory's group_vars/all/paths.yml"),
    # drain, toolchain, stack
    ("drain-grace-zero", lambda: drain_problems("ct200", {"gpu_drain_grace_seconds": 0}),
     "ct200", "gpu_drain_grace_seconds", "e.g. 300"),
    ("drain-force-without-selector",
     lambda: drain_problems("ct200", {"gpu_drain_force": True, "gpu_drain_units": []}),
     "ct200", "gpu_drain_force", "gpu_drain_gpu_holders: true"),
    ("drain-unit-pattern", lambda: drain_problems("ct200", {"gpu_drain_units": ["train*"]}),
     "ct200", "gpu_drain_units", "name units exactly"),
    ("cuda-release-unknown",
     lambda: stack_problems("ct200", {"cuda_toolkit_version": "13.9",
                                        "cuda_toolkit_releases": {"13.0": {}, "13.2": {}}}),
     "ct200", "cuda_toolkit_version", "pick a known release"),
    ("sglang-version-without-lock",
     lambda: stack_problems("ct200", {"sglang_version": "0.4.0",
                                        "sglang_lock_dir": str(ROOT / "roles/sglang/files/locks")}),
     "ct200", "sglang_version", "scripts/lock_stack.py --sglang 0.4.0"),
    ("build-slot-not-a-name",
     lambda: stack_problems("ct200", {"sglang_kernel_from_source": True,
                                        "sglang_kernel_build_slot": "kpro6; reboot"}),
     "ct200", "sglang_kernel_build_slot", "use letters, digits"),
    # the controller
    ("ssh-key-missing",
     lambda: controller_problems({"kpro6": "Unable to access the file '~/.ssh/id_ed25519.pub'"},
                                   None),
     "kpro6", "proxmox_lxc_ssh_public_key", "ssh-keygen -t ed25519 -f ~/.ssh/id_ed25519"),
    ("wheelhouse-disk-full",
     lambda: controller_problems({}, "/tmp/wheelhouse-nowhere", min_free_gib=10**9, tools={}),
     "controller", "sglang_lxc_wheelhouse", "point sglang_lxc_wheelhouse at a larger disk"),
    ("tool-missing",
     lambda: controller_problems({}, None, tools={"no-such-tool-h11a": "apt-get install x"}),
     "controller", "PATH", "`apt-get install x`"),
]


@pytest.mark.parametrize(("problems", "host", "var", "fix"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])
def test_mistake_is_reported_with_host_variable_and_fix(problems, host, var, fix):
    found = problems()
    matching = [p for p in found if var in p]
    assert matching, f"no problem names {var}: {found}"
    line = matching[0]
    assert line.startswith(f"{host}: "), line
    assert fix in " ".join(line.split()), line
    assert "\n" not in line
    assert "Task failed" not in line and "filter plugin" not in line


def test_corpus_is_large_enough():
    assert len(CASES) >= 30


def test_good_inputs_give_no_problem():
    assert containers(ct(211), ct(212, gpus=[0, 1]), gpus=True) == []
    assert containers(ct(211, ip="192.0.2.5/24", gateway="192.0.2.1",
                         allow_ip_outside_bridge=True)) == []
    assert cloned(ct(211, clone_from=260), ct(212, clone_from=260, clone_full=True)) == []
    # an existing clone does not need its template any more
    assert cloned(ct(200, clone_from=260), pve1="") == []
    assert serve() == []
    assert router() == []
    assert drain_problems("ct200", {"gpu_drain_grace_seconds": 60, "gpu_drain_units": []}) == []


def test_internal_magic_and_lab_variables_are_not_unknown():
    names = ["__proxmox_lxc_containers", "__sglang_serve_instances", "inventory_hostname",
             "ansible_host", "groups", "hostvars", "lab_root", "lab_ssh_key", "vault_x",
             "sglang_lxc_model_store", "sglang_serve_endpoints", "sglang_kernel_result"]
    assert unknown_variables_by_host({"ct200": names}, DECLARED) == []


def test_declared_set_is_specs_defaults_and_play_level():
    for role, options in SPECS.items():
        assert set(options) <= DECLARED, role
    for role, defaults in role_defaults().items():
        assert set(defaults) <= DECLARED, role
    assert "sglang_lxc_gpus_expected" in DECLARED


def test_play_level_names_the_plays_need_are_the_ones_without_a_default():
    required = required_play_vars(play_role_vars())
    assert {"sglang_lxc_venv", "sglang_lxc_model_store", "sglang_lxc_wheelhouse",
            "sglang_lxc_node", "sglang_lxc_uv_cache"} <= required
    assert required <= set(PLAY_LEVEL_VARS)
    assert required_play_vars({"r": {"x": "{{ sglang_lxc_venv | default('/v') }}"}}) == set()
    lab = {n: "/x" for n in required}
    assert missing_play_vars("ct200", lab, required) == []


def test_plays_pass_the_model_store_to_sglang_serve():
    passed = play_role_vars()
    assert "sglang_lxc_model_store" in passed["sglang_serve"]["sglang_serve_model_store"]


def test_node_state_is_parsed():
    parsed = state(gpus=True)
    assert parsed["cores"] == 2
    assert parsed["memory_mib"] == 24683584 // 1024
    assert parsed["gpus"] == [0, 1]
    assert parsed["bridges"]["lxcbr0"] == ["10.0.3.1/24"]
    assert parsed["containers"] == {200: {"name": "ct200", "ip": "10.0.3.200"}}
    assert parsed["templates"] == ["debian-12-lab.tar.zst"]


def test_wrong_type_message_says_the_type():
    line = containers(ct(211, memory="16G"), live=False)[0]
    assert "memory: must be an integer number of MiB, got the string '16G'" in line


def test_args_file_is_argv_never_a_shell(tmp_path):
    """Canary: an argument `$(touch CANARY)` reaches the server literally and creates nothing."""
    canary = tmp_path / "canary"
    second = tmp_path / "canary2"
    extra = [f"$(touch {canary})", f"; touch {second}", "`id`", "two words", '{"a": 1}']
    found, instances = serve_problems(
        "ct200", {**SERVE_BASE, "sglang_serve_extra_args": extra}, 1
    )
    assert found == []
    templates = ROOT / "roles/sglang_serve/templates"
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(templates)), autoescape=False,
                             trim_blocks=True)  # as Ansible renders templates
    context = {
        "ansible_managed": "test",
        "sglang_serve_config_dir": str(tmp_path),
        "sglang_serve_launch_command": ["/usr/bin/printf", "%s\\n"],
        "sglang_serve_api_key": "",
        "item": instances[0],
    }
    (tmp_path / "gpu0.args").write_text(env.get_template("instance.args.j2").render(context))
    launcher = tmp_path / "sglang-instance"
    launcher.write_text(env.get_template("sglang-instance.j2").render(context))
    out = subprocess.run(["/bin/bash", str(launcher), "gpu0"], capture_output=True, text=True,
                         check=True, cwd=tmp_path)
    printed = out.stdout.splitlines()
    # the extra arguments, then the instance's --config file (the API key's home)
    assert printed[-len(extra) - 2:-2] == extra
    assert printed[-2:] == ["--config", f"{tmp_path}/gpu0.yaml"]
    assert not canary.exists() and not second.exists()
    assert Path(tmp_path / "gpu0.args").read_text().count("$(touch") == 1


def test_values_known_only_at_run_time_are_not_problems():
    from ansible.errors import AnsibleUndefinedVariable

    assert is_runtime_undefined(AnsibleUndefinedVariable("'ansible_default_ipv4' is undefined"))
    lookup = RuntimeError("The lookup plugin 'ansible.builtin.file' failed: Unable to access "
                          "the file '~/.ssh/id_ed25519.pub'")
    assert not is_runtime_undefined(lookup)
    line = template_error_problem("kpro6", "proxmox_lxc_template_dir", lookup)
    assert line.startswith("kpro6: proxmox_lxc_template_dir: cannot be evaluated: The lookup")
    assert "Fix: correct proxmox_lxc_template_dir" in line


def test_node_state_script_reads_the_config_folder_without_pct(tmp_path):
    """A readable config folder names the containers: no `pct list` start-up (pct: /bin/false)."""
    configs = tmp_path / "lxc"
    configs.mkdir()
    (configs / "213.conf").write_text("hostname: ct213\nnet0: name=eth0,ip=10.0.3.213/24\n"
                                      "[snap]\nhostname: old\n")
    (configs / "notes.conf").write_text("hostname: not-a-container\n")
    script = ROOT / "playbooks/files/node_state.sh"
    out = subprocess.run(["bash", str(script), "/bin/false", str(tmp_path), str(configs)],
                         capture_output=True, text=True, check=True).stdout
    assert parse_node_state(out)["containers"] == {213: {"name": "ct213", "ip": "10.0.3.213"}}


@pytest.mark.parametrize("inventory", ["lab", "example"])
def test_every_play_level_path_of_the_inventories_is_declared(inventory):
    """A new sglang_lxc_* variable in an inventory must be known to the validate pass too."""
    import yaml

    names = set()
    for path in (ROOT / "inventory" / inventory).rglob("*.yml"):
        data = yaml.safe_load(path.read_text()) or {}
        if isinstance(data, dict):
            names |= {n for n in data if str(n).startswith("sglang_lxc_")}
    assert names, inventory
    assert names <= set(PLAY_LEVEL_VARS), sorted(names - set(PLAY_LEVEL_VARS))
