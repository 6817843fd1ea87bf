"""The PCIe fabric of every tensor-parallel group (plugins/plugin_utils/validate_fabric.py).

Each case runs the node's side for real: playbooks/files/node_fit.py with the recorded NVML
answers as pynvml (P2P status and common ancestor of each pair), the recorded lspci first on PATH
and a recorded /proc and /sys (tests/standins/recorded_node.py), of a public 8x RTX PRO 6000
Blackwell Server box (ASUS ESC8000A-E13P, two Broadcom PEX890xx switches, dual EPYC; the sources
are in each recording's _about and _sources):

- rtx_pro_6000_x8_asus_p2p_ok.json: ACS redirect off on every bridge, IOMMU off: no fix;
- rtx_pro_6000_x8_asus_acs_on.json: the same box with ACS redirect on its 12 root and switch
  ports, as the box ships: a verdict naming the fix, and NCCL_P2P_DISABLE=1 chosen.

Variations of a recording made here (an IOMMU that translates, P2P not supported) say so.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_fabric import (
    fabric_findings,
    iommu_mode,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_fit import parse_fit
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_serving import (
    serve_problems,
)

from tests.example_kimi import CT, SERVE
from tests.loaders import ROOT, load_file

recorded_node = load_file("recorded_node", ROOT / "tests/standins/recorded_node.py")

RECORDINGS = ROOT / "tests/unit/gpu/recordings"
NODE_FIT = ROOT / "playbooks/files/node_fit.py"
READER = ROOT / "plugins/module_utils/sglang_load_progress.py"
P2P_OK = RECORDINGS / "rtx_pro_6000_x8_asus_p2p_ok.json"
ACS_ON = RECORDINGS / "rtx_pro_6000_x8_asus_acs_on.json"
ACS_BRIDGES = ("0000:00:01.1, 0000:02:03.0, 0000:02:04.0, 0000:70:01.1, 0000:72:02.0, "
               "0000:72:03.0, 0000:80:01.1, 0000:82:01.0, 0000:82:02.0, 0000:f0:01.1, "
               "0000:f2:01.0, 0000:f2:02.0")


def node_read(recording, tmp_path) -> dict:
    """node_fit.py on the recorded node, as node_state.sh runs it."""
    root = recorded_node.materialise(recording, tmp_path / "node")
    out = subprocess.run([sys.executable, "-c", NODE_FIT.read_text(), READER.read_text()],
                         capture_output=True, text=True, env=recorded_node.env(recording, root),
                         check=True, timeout=60).stdout
    return parse_fit(out.splitlines())


def variant(tmp_path, change) -> str:
    """A copy of the ACS-on recording changed by ``change(recording)`` (named in each test)."""
    recording = json.loads(ACS_ON.read_text())
    change(recording)
    path = tmp_path / "variant.json"
    path.write_text(json.dumps(recording))
    return path


def judge(fit: dict, **values):
    settings = {**SERVE, **values}
    found, instances = serve_problems("ct200", settings, 8)
    assert not found, found
    return fabric_findings("ct200", instances, settings, CT, fit)


def test_the_node_read_gives_each_pairs_p2p_status_ancestor_and_the_bridges(tmp_path):
    fit = node_read(P2P_OK, tmp_path)
    pairs = {tuple(p["gpus"]): p for p in fit["p2p"]}
    assert len(pairs) == 28
    # NVML index 0 is 06:00.0 (minor 2), index 1 is 07:00.0 (minor 3): one switch (PIX)
    assert pairs[(2, 3)] == {"gpus": [2, 3], "read": "OK", "write": "OK", "ancestor": "PIX"}
    assert pairs[(2, 0)]["ancestor"] == "NODE" and pairs[(2, 6)]["ancestor"] == "SYS"
    fabric = fit["fabric"]
    assert fabric["paths"]["0000:06:00.0"] == ["0000:00:01.1", "0000:01:00.0", "0000:02:03.0"]
    assert fabric["acs"]["0000:02:03.0"] == (
        "SrcValid+ TransBlk- ReqRedir- CmpltRedir- UpstreamFwd+ EgressCtrl- DirectTrans-")
    assert "0000:01:00.0" not in fabric["acs"]  # the switch's upstream port has no ACS
    assert fabric["cmdline"].endswith("amd_iommu=off iommu=off")
    assert fabric["errors"] == []


def test_p2p_ok_recording_gives_a_finding_and_no_fix(tmp_path):
    warnings, notes, env = judge(node_read(P2P_OK, tmp_path))
    assert warnings == [] and env == {}
    assert notes == ["kimi-tp8: 8 GPUs, P2P read/write OK, PIX/NODE/SYS, IOMMU off, "
                     "ACS redirect off"]


def test_acs_on_recording_names_the_fix_with_its_cost_and_chooses_the_nccl_env(tmp_path):
    warnings, notes, env = judge(node_read(ACS_ON, tmp_path))
    assert env == {"kimi-tp8": {"NCCL_P2P_DISABLE": "1"}}
    assert warnings == [f"ct200: {notes[0]}"]
    assert notes == [
        "kimi-tp8: 8 GPUs, P2P read/write OK, PIX/NODE/SYS, IOMMU off, ACS redirect on 12 "
        f"bridge(s) above its GPUs ({ACS_BRIDGES}): ACS redirects the GPUs' peer-to-peer traffic "
        "through the root complex, where NCCL hangs or crawls. Fix, one of: ACS disabled on "
        "those bridges (setpci -s <bridge> ECAP_ACS+0x6.w=0000 at every boot, or in the BIOS; "
        "cost: the devices below them fall into one IOMMU group and can no longer be passed to "
        "different VMs); NCCL_P2P_DISABLE=1 in the group's environment (cost: the "
        "tensor-parallel all-reduce goes through host shared memory instead of PCIe "
        "peer-to-peer, at a fraction of its bandwidth). NCCL: chosen until then: "
        "NCCL_P2P_DISABLE=1 (set NCCL_P2P_DISABLE or NCCL_P2P_LEVEL in the instance's env or "
        "sglang_serve_env to choose otherwise)"]


def test_a_group_under_one_switch_is_judged_by_the_ports_its_traffic_crosses(tmp_path):
    """Container GPUs 0 and 1 are node minors 0 and 1 (75:00.0, 76:00.0): one switch, so only
    its two downstream ports matter, not the root port above it."""
    fit = node_read(ACS_ON, tmp_path)
    _w, notes, env = judge(fit, sglang_serve_instances=[{"name": "pair", "gpus": [0, 1]}])
    assert notes[0].startswith("pair: 2 GPUs, P2P read/write OK, PIX, IOMMU off, ACS redirect "
                               "on 2 bridge(s) above its GPUs (0000:72:02.0, 0000:72:03.0)")
    assert env == {"pair": {"NCCL_P2P_DISABLE": "1"}}
    # one-GPU instances have no group: nothing to say
    assert judge(fit, sglang_serve_instances=[]) == ([], [], {})


def test_the_inventory_wins_over_the_chosen_env(tmp_path):
    fit = node_read(ACS_ON, tmp_path)
    instance = {**SERVE["sglang_serve_instances"][0], "env": {"NCCL_P2P_LEVEL": "SYS"}}
    _w, notes, env = judge(fit, sglang_serve_instances=[instance])
    assert env == {}
    assert notes[0].endswith("NCCL: kept from the inventory: NCCL_P2P_LEVEL=SYS "
                             "(sglang_serve_instances[0] (kimi-tp8).env.NCCL_P2P_LEVEL)")
    _w, notes, env = judge(fit, sglang_serve_env={"NCCL_P2P_DISABLE": "0"})
    assert env == {} and notes[0].endswith("NCCL_P2P_DISABLE=0 (sglang_serve_env.NCCL_P2P_DISABLE)")


def test_an_iommu_that_translates_names_iommu_pt(tmp_path):
    """Variation: the ACS-on box with the IOMMU on as a Proxmox node for VM passthrough has it
    (AMD IOMMU units, no iommu=pt, the GPUs' groups translated: DMA-FQ)."""
    def translate(recording):
        fabric = recording["fabric"]
        fabric["cmdline"] = "BOOT_IMAGE=/boot/vmlinuz-6.8.12-4-pve root=/dev/mapper/pve-root ro"
        fabric["iommu_units"] = ["ivhd0", "ivhd1"]
        fabric["iommu_groups"] = {a: "DMA-FQ" for a in fabric["sysfs_paths"]}
    fit = node_read(variant(tmp_path, translate), tmp_path)
    _w, notes, env = judge(fit)
    assert "IOMMU translated (DMA-FQ), ACS redirect on 12 bridge(s)" in notes[0]
    assert ("the IOMMU translates and ACS redirects the GPUs' peer-to-peer traffic" in notes[0])
    assert ('Fix, one of: "iommu=pt" on the kernel command line of kpro6 (cost: a reboot of '
            "kpro6; the host's own devices are no longer translated by the IOMMU, VM passthrough "
            "keeps working); ACS disabled on those bridges") in notes[0]
    assert env == {"kimi-tp8": {"NCCL_P2P_DISABLE": "1"}}


def test_p2p_not_supported_is_a_finding_without_fix(tmp_path):
    """Variation: NVML reports the chipset does not support P2P (CNS): CUDA then denies peer
    access and NCCL goes through host memory by itself."""
    def no_p2p(recording):
        recording["fabric"]["p2p_read"] = recording["fabric"]["p2p_write"] = "CNS"
    warnings, notes, env = judge(node_read(variant(tmp_path, no_p2p), tmp_path))
    assert (warnings, env) == ([], {})
    assert notes == ["kimi-tp8: 8 GPUs, P2P read/write not OK (CNS), PIX/NODE/SYS: NCCL goes "
                     "through host memory between them"]


def test_without_the_fabric_the_group_is_noted_not_judged(tmp_path):
    fit = node_read(RECORDINGS / "rtx_pro_6000_x8_training.json", tmp_path)
    assert judge(fit) == ([], ["kimi-tp8: 8 GPUs, PCIe fabric not read on kpro6 (no NVML "
                                "answer for the P2P status of its GPUs)"], {})


@pytest.mark.parametrize(
    ("fabric", "mode"),
    [({"cmdline": "ro quiet", "iommu_units": []}, "off"),
     ({"cmdline": "ro iommu=pt", "iommu_units": ["dmar0"]}, "passthrough"),
     ({"cmdline": "ro intel_iommu=on", "iommu_units": ["dmar0"]},
      "translated (the kernel's default domain)"),
     ({"cmdline": "ro", "iommu_units": ["dmar0"], "iommu_groups": {"g": "identity"}},
      "passthrough"),
     ({"cmdline": "ro iommu=pt", "iommu_units": ["dmar0"], "iommu_groups": {"g": "DMA"}},
      "translated (DMA)")],
    ids=["none", "iommu-pt", "intel-on", "identity-group", "group-wins"],
)
def test_iommu_mode(fabric, mode):
    assert iommu_mode(fabric, ["g"]) == mode


def test_smi_topology_matrix_is_read_as_nvml_answers_it():
    """nvidia-smi's own matrix (the recording's lines, as nvidia_topo.log prints them) gives the
    same ancestors as the recorded NVML answers: the fallback without pynvml."""
    node_fit = load_file("node_fit_for_fabric", NODE_FIT)
    cells = node_fit.smi_matrix("\n".join(json.loads(P2P_OK.read_text())["fabric"]["topology"]))
    assert cells[(0, 1)] == "PIX" and cells[(0, 2)] == "NODE" and cells[(3, 4)] == "SYS"
    assert len(cells) == 28
    assert node_fit.lspci_acs("00:01.1 PCI bridge: x\n\tCapabilities: <access denied>\n") == {
        "0000:00:01.1": None}
