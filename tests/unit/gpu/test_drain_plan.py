"""gpu_drain: input checks, target selection, memory release and summary (no systemd here)."""

from __future__ import annotations

import pytest
from gpu_helpers import gpu_drain, gpu_drain_plan, gpu_nvml, nvml, trainer_tree

KEEP = gpu_drain_plan.DEFAULT_KEEP


def pgid_of(pid):
    return {900: 900, 901: 900}.get(pid, pid)


def units_in(proc_root):
    by_unit = {}
    for holder in gpu_nvml.scan_device_holders(proc_root):
        by_unit.setdefault(holder["unit"], []).append(holder["pid"])
    return by_unit


# --- bad input -------------------------------------------------------------------------------


@pytest.mark.parametrize("grace", [0, -5, None])
def test_grace_must_be_positive(grace):
    with pytest.raises(gpu_drain_plan.DrainInputError, match="gpu_drain_grace_seconds"):
        gpu_drain_plan.validate(["trainer"], False, grace, False)


def test_force_needs_a_selector():
    with pytest.raises(gpu_drain_plan.DrainInputError, match=r"gpu_drain_force: true needs"):
        gpu_drain_plan.validate([], False, 60, True)
    gpu_drain_plan.validate([], True, 60, True)  # holders selector is enough


@pytest.mark.parametrize("unit", ["train*", "a b.service", "../etc", ""])
def test_unit_names_are_exact(unit):
    with pytest.raises(gpu_drain_plan.DrainInputError, match="gpu_drain_units"):
        gpu_drain_plan.validate([unit], False, 60, False)


def test_all_errors_at_once():
    with pytest.raises(gpu_drain_plan.DrainInputError) as info:
        gpu_drain_plan.validate([], False, 0, True, memory_wait_seconds=-1)
    text = str(info.value)
    assert "gpu_drain_grace_seconds" in text and "gpu_drain_force" in text
    assert "gpu_drain_memory_wait_seconds" in text


def test_normalize_unit():
    assert gpu_drain_plan.normalize_unit("trainer") == "trainer.service"
    assert gpu_drain_plan.normalize_unit("sglang@0.service") == "sglang@0.service"


# --- selection -------------------------------------------------------------------------------


def host_with_everything(fake_proc):
    trainer_tree(fake_proc)
    for i in range(2):
        fake_proc.add(
            5000 + i,
            f"/opt/sglang/venv/bin/python -m sglang.launch_server --port {30000 + i}",
            unit=f"sglang@{i}.service",
            devices=("/dev/nvidiactl", f"/dev/nvidia{i}"),
        )
    fake_proc.add(
        5100,
        "/opt/sglang/venv/bin/python -m sglang_router.launch_router",
        unit="sglang-router.service",
        devices=("/dev/nvidiactl",),
    )
    fake_proc.add(
        600,
        "/usr/bin/nvidia-persistenced",
        unit="nvidia-persistenced.service",
        devices=("/dev/nvidiactl",),
    )
    # a notebook kernel started from a shell: no service, its own process group 900
    fake_proc.add(900, "python3 -m ipykernel", devices=("/dev/nvidiactl", "/dev/nvidia7"))
    fake_proc.add(901, "python3 worker.py", devices=("/dev/nvidia7",))
    # the module itself (and its parent), which must never be selected
    fake_proc.add(777, "/usr/bin/python3 AnsiballZ_gpu_drain_stop.py", devices=("/dev/nvidiactl",))
    return gpu_nvml.scan_device_holders(str(fake_proc.root))


def test_explicit_unit(fake_proc):
    holders = host_with_everything(fake_proc)
    chosen = gpu_drain_plan.plan(
        ["trainer.service"],
        False,
        KEEP,
        {"trainer.service": {"LoadState": "loaded", "ActiveState": "active"}},
        units_in(str(fake_proc.root)),
        holders,
        [777],
        pgid_of,
    )
    [target] = chosen["units"]
    assert target["unit"] == "trainer.service" and target["kind"] == "unit"
    assert target["pids"] == list(range(4101, 4109))
    assert target["gpu_minors"] == list(range(8))
    assert chosen["groups"] == [] and chosen["warnings"] == []


def test_gpu_holders_spares_our_units_and_ourselves(fake_proc):
    holders = host_with_everything(fake_proc)
    chosen = gpu_drain_plan.plan(
        [], True, KEEP, {}, units_in(str(fake_proc.root)), holders, [777], pgid_of
    )
    assert [t["unit"] for t in chosen["units"]] == ["trainer.service"]
    assert [(g["pgid"], g["pids"], g["gpu_minors"]) for g in chosen["groups"]] == [
        (900, [900, 901], [7])
    ]
    assert sorted(k["unit"] for k in chosen["kept"]) == [
        "nvidia-persistenced.service",
        "sglang-router.service",
        "sglang@0.service",
        "sglang@1.service",
    ]
    all_pids = {p for t in chosen["units"] + chosen["groups"] for p in t["pids"]}
    assert 777 not in all_pids and 5000 not in all_pids


def test_group_sharing_our_process_group_is_not_signalled(fake_proc):
    fake_proc.add(900, "python3 -m ipykernel", devices=("/dev/nvidia0",))
    holders = gpu_nvml.scan_device_holders(str(fake_proc.root))
    chosen = gpu_drain_plan.plan(
        [], True, KEEP, {}, {}, holders, [777], lambda pid: 900 if pid in (900, 777) else pid
    )
    assert chosen["groups"] == []
    assert any("shares our process group" in w for w in chosen["warnings"])


def test_selectors_that_match_nothing_warn(fake_proc):
    chosen = gpu_drain_plan.plan(
        ["nosuch.service"],
        True,
        KEEP,
        {"nosuch.service": {"LoadState": "not-found", "ActiveState": "inactive"}},
        {},
        [],
        [1],
        pgid_of,
    )
    assert chosen["units"] == [] and chosen["groups"] == []
    assert chosen["warnings"] == [
        "gpu_drain_units: nosuch.service matched nothing (no such unit)",
        "gpu_drain_gpu_holders: nothing outside the kept units holds /dev/nvidia*",
    ]
    none = gpu_drain_plan.plan([], False, KEEP, {}, {}, [], [1], pgid_of)
    assert none["warnings"] == [
        "no workload selected: set gpu_drain_units or gpu_drain_gpu_holders: true"
    ]


def test_stopped_unit_is_idle_not_a_warning():
    chosen = gpu_drain_plan.plan(
        ["trainer.service"],
        False,
        KEEP,
        {"trainer.service": {"LoadState": "loaded", "ActiveState": "inactive"}},
        {},
        [],
        [1],
        pgid_of,
    )
    assert chosen["units"] == [] and chosen["warnings"] == []
    assert chosen["idle"] == [{"unit": "trainer.service", "active_state": "inactive"}]


def test_failed_unit_with_leftover_processes_is_still_a_target():
    """What a drain without force leaves: systemd gave up, the process lives on."""
    chosen = gpu_drain_plan.plan(
        ["stubborn.service"],
        False,
        KEEP,
        {"stubborn.service": {"LoadState": "loaded", "ActiveState": "failed"}},
        {"stubborn.service": [321]},
        [],
        [1],
        pgid_of,
    )
    assert [t["pids"] for t in chosen["units"]] == [[321]]


@pytest.mark.parametrize(("force", "kill"), [(False, "no"), (True, "yes")])
def test_dropin(force, kill):
    text = gpu_drain_plan.dropin_text(300, force)
    assert "[Service]\nTimeoutStopSec=300s\n" in text and f"SendSIGKILL={kill}\n" in text


# --- memory release --------------------------------------------------------------------------


def training_facts(fake_proc):
    trainer_tree(fake_proc)
    fake = nvml("rtx_pro_6000_x8_training")
    before = gpu_nvml.collect(fake, proc_root=str(fake_proc.root))
    return fake, before


def drain_of(before, shared=()):
    return {
        "stopped": [
            {
                "kind": "unit",
                "unit": "trainer.service",
                "pids": list(range(4101, 4109)),
                "gpu_minors": list(range(8)),
            }
        ],
        "killed": [],
        "left_running": [],
        "other_holders": [{"pid": 5000, "gpu_minors": list(shared)}],
    }


def test_memory_released_after_the_trainer_stops(fake_proc):
    fake, before = training_facts(fake_proc)
    drain = drain_of(before)
    # right after the stop, NVML still lists the workers and the memory
    state = gpu_drain.memory_state(before, before, drain)
    assert not state["released"] and len(state["waiting"]) == 8
    assert state["waiting"][0] == "GPU 0: NVML still lists pid(s) [4101]"
    # the driver frees it
    for i in range(8):
        fake.set_processes(i, [])
        fake.set_memory_used(i, 3 * 1024 * 1024)
    after = gpu_nvml.collect(fake, proc_root=str(fake_proc.root))
    state = gpu_drain.memory_state(after, before, drain)
    assert state["released"] and state["watched"] == list(range(8))
    assert state["freed_mib"] == 8 * (91136 - 3)
    summary = gpu_drain.summary(drain, state)
    assert summary == "8 processes stopped (trainer.service), 712.0 GiB freed"


def test_memory_held_too_long_is_reported(fake_proc):
    fake, before = training_facts(fake_proc)
    fake.set_processes(2, [])
    after = gpu_nvml.collect(fake, proc_root=str(fake_proc.root))
    state = gpu_drain.memory_state(after, before, drain_of(before), idle_mib=1024)
    assert "GPU 2: 91136 MiB used (released at <= 1024 MiB)" in state["waiting"]


def test_gpu_shared_with_a_process_we_kept_only_waits_for_the_pids(fake_proc):
    fake, before = training_facts(fake_proc)
    for i in range(8):
        fake.set_processes(i, [])
    fake.set_memory_used(0, 40000 * 1024 * 1024)  # sglang@0 still holds GPU 0
    for i in range(1, 8):
        fake.set_memory_used(i, 0)
    after = gpu_nvml.collect(fake, proc_root=str(fake_proc.root))
    state = gpu_drain.memory_state(after, before, drain_of(before, shared=[0]))
    assert state["released"]


def test_inside_lxc_minors_tell_which_gpus_to_watch(fake_proc):
    """NVML lists host PIDs; the /dev/nvidiaN minors from /proc still name the GPUs."""
    trainer_tree(fake_proc, pids=range(301, 303))  # two workers, GPUs 0 and 1
    fake = nvml("rtx_pro_6000_x8_training")
    before = gpu_nvml.collect(fake, proc_root=str(fake_proc.root))
    drain = {"stopped": [{"unit": "trainer.service", "pids": [301, 302], "gpu_minors": [0, 1]}]}
    state = gpu_drain.memory_state(before, before, drain)
    assert state["watched"] == [0, 1]
    assert state["waiting"][0] == "GPU 0: 91136 MiB used (released at <= 1024 MiB)"


def test_summary_without_nvml_and_when_left_running():
    drain = {
        "stopped": [{"unit": "trainer.service", "pids": [42]}],
        "killed": [],
        "left_running": [{"unit": "stubborn.service", "pids": [43]}],
    }
    assert gpu_drain.summary(drain, None, "no NVML (NVML Shared Library Not Found)") == (
        "1 process stopped (trainer.service), left running: stubborn.service, "
        "memory wait skipped: no NVML (NVML Shared Library Not Found)"
    )
    assert gpu_drain.summary({"stopped": [], "killed": []}) == "nothing to stop"


def test_memory_skip_names_the_first_reason_that_applies(fake_proc):
    _, before = training_facts(fake_proc)
    drain = drain_of(before)
    skip = gpu_drain.memory_skip
    assert skip(drain, before, False, 120, True) == ""
    assert skip(drain, before, True, 120, True) == "check mode: nothing was stopped"
    assert skip({"stopped": [], "killed": []}, before, False, 120, True) == "nothing was stopped"
    killed_only = {"stopped": [], "killed": drain["stopped"]}
    assert skip(killed_only, before, False, 120, True) == ""
    assert skip(drain, before, False, 0, True) == "gpu_drain_memory_wait_seconds is 0"
    # gpu_drain_nvml_enabled false: facts.yml never ran, so there is no reading from before
    assert skip(drain, None, False, 120, False) == "gpu_drain_nvml_enabled is false"
    no_nvml = {"nvml_available": False, "nvml_error": "NVML Shared Library Not Found"}
    assert skip(drain, no_nvml, False, 120, True) == "no NVML (NVML Shared Library Not Found)"
    no_gpu = {"nvml_available": True, "gpu_count": 0}
    assert skip(drain, no_gpu, False, 120, True) == "NVML sees no GPU"
    # check mode wins over everything else: nothing was stopped for real
    assert skip({}, {}, True, 0, False) == "check mode: nothing was stopped"
