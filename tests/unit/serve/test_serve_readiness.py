"""State classification of the sglang_readiness module (no systemd, no network)."""

from __future__ import annotations

import json
import os
from pathlib import Path

from serve_helpers import load_progress, probes, readiness

classify = readiness.classify
# SGLang 0.5.12's own GET /server_info answer for a CPU instance started without
# --attention-backend (recordings/README.md; its API key redacted)
SERVER_INFO = (Path(__file__).parent / "recordings" / "server_info_cpu.json").read_bytes()
RUNNING = {
    "ActiveState": "active",
    "SubState": "running",
    "MainPID": "42",
    "NRestarts": "0",
    "InvocationID": "abc",
}


def obs(**values):
    base = {
        "port_open": False,
        "http_status": None,
        "log_count": 5,
        "read_bytes": 0,
        "memory_mib": None,
        "crash": None,
        "model_listed": False,
        "baseline": {"restarts": 0, "invocation": "abc"},
    }
    return {**base, **values}


def test_loading_while_the_log_grows_never_hangs():
    record = classify(obs(log_count=1), None, 0.0, stall_timeout=10)
    for t in range(1, 60):
        record = classify(obs(log_count=1 + t), record, float(t), stall_timeout=10)
        assert record["state"] == "loading"
    assert "port closed" in record["detail"]


def test_gpu_memory_growth_counts_as_progress():
    record = classify(obs(memory_mib=0), None, 0.0, 10)
    for t in range(1, 40):
        record = classify(obs(memory_mib=t * 1024), record, float(t), 10)
    assert record["state"] == "loading"
    assert "GPU memory" in record["detail"]


def test_no_progress_for_stall_timeout_is_hung():
    record = classify(obs(), None, 0.0, 10)
    record = classify(obs(), record, 9.0, 10)
    assert record["state"] == "loading"
    record = classify(obs(), record, 10.0, 10)
    assert record["state"] == "hung"
    assert "no progress for 10s" in record["detail"]


def test_warmup_then_healthy():
    record = classify(obs(port_open=True, http_status=503), None, 0.0, 10)
    assert record["state"] == "warming"
    record = classify(obs(port_open=True, http_status=200, model_listed=True), record, 1.0, 10)
    assert record["state"] == "healthy"


def test_health_ok_but_model_missing_is_not_healthy():
    record = classify(obs(port_open=True, http_status=200, models_detail="lists x"), None, 0, 10)
    assert record["state"] == "warming"


def test_crash_wins():
    record = classify(obs(crash="unit failed"), None, 0.0, 10)
    assert record["state"] == "crashed"


def test_unit_crashed_reasons():
    crashed = probes.unit_crashed
    assert crashed(RUNNING, {"restarts": 0, "invocation": "abc"}) is None
    assert "failed" in crashed({**RUNNING, "ActiveState": "failed"}, None)
    assert "restart" in crashed(
        {**RUNNING, "ActiveState": "activating", "SubState": "auto-restart"}, None
    )
    assert "inactive" in crashed({**RUNNING, "ActiveState": "inactive"}, None)
    assert "restarted" in crashed({**RUNNING, "NRestarts": "1"}, {"restarts": 0})
    assert "started again" in crashed(
        {**RUNNING, "InvocationID": "new"}, {"restarts": 0, "invocation": "abc"}
    )


def test_outcome_and_table():
    assert readiness.outcome_of(["healthy", "healthy"], 5, 10) == "healthy"
    assert readiness.outcome_of(["healthy", "loading"], 5, 10) == "waiting"
    assert readiness.outcome_of(["healthy", "loading"], 11, 10) == "timeout"
    assert readiness.outcome_of(["hung", "crashed"], 1, 10) == "crashed"
    table = readiness.render_table(
        [
            {
                "name": "gpu0",
                "gpus": [0],
                "port": 30000,
                "memory_mib": 86732,
                "http_status": 200,
                "state": "healthy",
            },
            {
                "name": "tp2",
                "gpus": [1, 2],
                "port": 30001,
                "memory_mib": None,
                "http_status": None,
                "state": "loading",
                "progress": {"text": "43% (235/547 GB, 1.9 GB/s, ETA 2m40s)"},
            },
        ]
    )
    assert table[0].split() == ["INSTANCE", "GPU", "PORT", "MEMORY", "HTTP", "STATE", "LOAD"]
    assert table[1].split() == ["gpu0", "0", "30000", "84.7", "GiB", "200", "healthy", "-"]
    assert table[2].split("loading", 1)[1].strip() == "43% (235/547 GB, 1.9 GB/s, ETA 2m40s)"


def test_models_listed():
    assert probes.models_listed(b'{"data": [{"id": "m"}]}', "m")[0]
    listed, why = probes.models_listed(b'{"data": [{"id": "x"}]}', "m")
    assert not listed
    assert "not m" in why


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def rounds(monkeypatch, script, stall=10.0, timeout=100.0, interval=2.0, **extra):
    """Run rounds of run_round; ``script(name, t)`` returns the observation at time t; ``extra``
    module arguments (``recovered``)."""
    clock = Clock()
    monkeypatch.setattr(readiness.time, "time", clock.time)
    monkeypatch.setattr(readiness.time, "sleep", clock.sleep)
    monkeypatch.setattr(readiness, "Nvml", lambda: None)
    monkeypatch.setattr(readiness, "journal_tail", lambda unit, n: [f"{unit} tail line"])
    start = clock.now
    monkeypatch.setattr(
        readiness, "observe",
        lambda inst, base, key, nvml, **kw: script(inst["name"], clock.now - start)
    )
    instances = [
        {
            "name": n,
            "unit": f"sglang@{n}.service",
            "gpus": [i],
            "port": 30000 + i,
            "probe_host": "127.0.0.1",
            "served_model_name": "m",
        }
        for i, n in enumerate(["gpu0", "gpu1"])
    ]
    params = {
        "instances": instances,
        "api_key": "",
        "interval": interval,
        "poll": 1.0,
        "stall_timeout": stall,
        "timeout": timeout,
        "state": {},
        "log_lines": 5,
        **extra,
    }
    results = []
    for _ in range(200):
        result = readiness.run_round(params)
        results.append(result)
        if result["done"]:
            break
        params["state"] = result["state"]
    return results


def test_rounds_report_loading_then_healthy(monkeypatch):
    def script(name, t):
        if t < 6:
            return obs(log_count=int(t))
        return obs(port_open=True, http_status=200, model_listed=True)

    results = rounds(monkeypatch, script)
    assert "loading for 0:00:0" in results[0]["report"][1]
    assert results[-1]["outcome"] == "healthy"
    assert results[-1]["verdict"] == "2/2 healthy"
    assert len(results) >= 3


def test_rounds_hung_after_stall_timeout_with_tail(monkeypatch):
    def script(name, t):
        if name == "gpu1":
            return obs(log_count=min(int(t), 3))  # stops logging at t=3
        return obs(port_open=True, http_status=200, model_listed=True)

    result = rounds(monkeypatch, script, stall=10)[-1]
    assert result["outcome"] == "hung"
    assert "sglang@gpu1.service hung: alive but no progress for 10s" in result["msg"]
    assert "sglang@gpu1.service tail line" in result["msg"]
    assert result["verdict"] == "1/2 healthy"


def test_rounds_crash_fails_at_once(monkeypatch):
    def script(name, t):
        if name == "gpu1" and t >= 2:
            return obs(crash="process exited (exit status 1)")
        return obs(log_count=int(t))

    results = rounds(monkeypatch, script, stall=100)
    assert results[-1]["outcome"] == "crashed"
    assert len(results) <= 3
    assert "sglang@gpu1.service tail line" in results[-1]["msg"]


# What module sglang_unit_recover returned for gpu1, started again by this run (its entry).
RECOVERED = {
    "sglang@gpu1.service": {
        "action": "restart",
        "cause": "exit status 9",
        "summary": "restarted: it had crashed 12 s before this run (exit status 9)",
        "text": "restarted: it had crashed 12 s before this run (exit status 9); "
                "last log: Scheduler hit an exception",
    }
}


def test_a_unit_recovered_before_the_wait_is_named_in_the_report_and_the_checklist(monkeypatch):
    def script(name, t):
        if t < 3:
            return obs(log_count=int(t))
        return obs(port_open=True, http_status=200, model_listed=True)

    results = rounds(monkeypatch, script, recovered=RECOVERED)
    first, last = results[0], results[-1]
    assert first["report"][2].startswith("  sglang@gpu1.service (GPU 1, port 30001): loading for ")
    assert first["report"][2].endswith(
        "; restarted: it had crashed 12 s before this run (exit status 9); "
        "last log: Scheduler hit an exception")
    assert "restarted" not in first["report"][1]  # gpu0 was not recovered
    assert first["summary"] == (
        "0/2 healthy; gpu0 loading; gpu1 loading; "
        "gpu1 restarted: it had crashed 12 s before this run (exit status 9)")
    assert last["outcome"] == "healthy"
    assert last["report"][2].startswith("  sglang@gpu1.service (GPU 1, port 30001): healthy for ")
    assert " - ready; restarted: it had crashed 12 s before this run" in last["report"][2]
    assert last["verdict"] == "2/2 healthy"
    assert last["checklist"] == (
        "2/2 healthy; gpu1 restarted: it had crashed 12 s before this run (exit status 9)")
    assert last["instances"][1]["recovered"] == RECOVERED["sglang@gpu1.service"]["text"]
    assert "recovered" not in last["instances"][0]


def test_without_recovered_units_the_checklist_is_the_verdict(monkeypatch):
    results = rounds(monkeypatch, lambda name, t: obs(port_open=True, http_status=200,
                                                      model_listed=True))
    assert results[-1]["checklist"] == results[-1]["verdict"] == "2/2 healthy"
    assert results[-1]["summary"] == "2/2 healthy"


def test_a_recovered_unit_that_crashes_again_in_the_wait_is_a_crash_loop(monkeypatch):
    def script(name, t):
        if name == "gpu1" and t >= 2:
            return obs(crash="process exited (exit status 1); systemd will restart it")
        return obs(log_count=int(t))

    last = rounds(monkeypatch, script, stall=100, recovered=RECOVERED)[-1]
    assert last["outcome"] == "crashed"
    detail = last["instances"][1]["detail"]
    assert detail == (
        "crash loop: it had crashed before this run (exit status 9) and crashed again in this "
        "wait: process exited (exit status 1); systemd will restart it")
    assert last["msg"].splitlines()[:3] == [
        "0/2 healthy; 1 crashed",
        f"sglang@gpu1.service crashed: {detail}",
        "last 1 log lines of sglang@gpu1.service:",
    ]
    assert "sglang@gpu1.service tail line" in last["msg"]  # SGLang's own lines, as before
    assert last["checklist"] == (
        "0/2 healthy; gpu1 restarted: it had crashed 12 s before this run (exit status 9), then "
        "crashed again in this wait")


def test_a_crash_of_a_unit_not_recovered_reads_as_before(monkeypatch):
    def script(name, t):
        if name == "gpu0" and t >= 2:
            return obs(crash="process exited (exit status 1); systemd will restart it")
        return obs(log_count=int(t))

    last = rounds(monkeypatch, script, stall=100, recovered=RECOVERED)[-1]
    assert last["instances"][0]["detail"] == (
        "process exited (exit status 1); systemd will restart it")


def test_crash_loop_wording_in_classify():
    note = readiness.recovery_note(RECOVERED["sglang@gpu1.service"])
    record = classify(obs(crash="unit failed (result exit-code, exit status 1)"), None, 0.0, 10,
                      recovered=note)
    assert record["state"] == "crashed"
    assert record["detail"] == (
        "crash loop: it had crashed before this run (exit status 9) and crashed again in this "
        "wait: unit failed (result exit-code, exit status 1)")
    assert classify(obs(port_open=True, http_status=200, model_listed=True), None, 0.0, 10,
                    recovered=note)["detail"] == "ready"
    text_only = readiness.recovery_note(RECOVERED["sglang@gpu1.service"]["text"])
    assert text_only["summary"] == RECOVERED["sglang@gpu1.service"]["summary"]
    assert readiness.crash_loop("x", text_only["cause"]) == (
        "crash loop: it had crashed before this run and crashed again in this wait: x")


def test_rounds_overall_timeout(monkeypatch):
    results = rounds(monkeypatch, lambda name, t: obs(log_count=int(t)), stall=1000, timeout=20)
    assert results[-1]["outcome"] == "timeout"
    assert "timeout 20s" in results[-1]["msg"]


# ------------------------------------------------------------------------ load progress
GB = 10**9


def test_progress_reads_like_the_issue_says():
    total = 547 * GB
    record = classify(obs(read_bytes=0, total_bytes=total), None, 0.0, 900)
    for t in range(1, 124):
        record = classify(obs(read_bytes=int(1.9 * GB * t), total_bytes=total), record,
                          float(t), 900)
    progress = record["progress"]
    assert record["state"] == "loading"
    assert progress["percent"] == 42 and progress["rate_bps"] == int(1.9 * GB)
    assert record["label"] == "loading 42% (234/547 GB, 1.9 GB/s, ETA 2m45s)"


def test_a_look_between_a_kill_and_the_restart_keeps_the_bytes_read():
    """CI once saw 73% then 67%: the unit's processes were gone (killed mid-load), read_bytes
    was None, and the percent fell back to SGLang's shard count, which lags the reads."""
    total = 2 * GB
    record = classify(obs(read_bytes=0, total_bytes=total), None, 0.0, 900)
    record = classify(obs(read_bytes=int(1.46 * GB), total_bytes=total, shards=[27, 40]), record,
                      40.0, 900)
    assert record["progress"]["percent"] == 73
    record = classify(obs(read_bytes=None, total_bytes=total, shards=[27, 40]), record, 44.0, 900)
    assert record["progress"]["percent"] == 73 and record["progress"]["rate_bps"] is None
    assert record["label"] == "loading 73% (1.5/2.0 GB, shards 27/40)"


def test_a_load_never_goes_back_when_the_units_processes_are_gone():
    """Issue 44: CI's jit run reported 0, 0, 5, 10, 16, 22 ... 81% and then 0%: a look between
    the test's kill and systemd's report of it found the unit active with an empty cgroup, and
    summed no process's reads as 0 bytes. That look is replayed here, then a TP worker's exit
    (its reads leave the sum): the percent holds."""
    total = 2_100_000_000
    percents, record = [], None
    for t, read in enumerate([0, 0, 105, 210, 336, 462, 900, 1300, 1701]):
        record = classify(obs(read_bytes=read * 10**6, total_bytes=total), record, 4.0 * t, 900)
        percents.append(record["progress"]["percent"])
    assert percents == [0, 0, 5, 10, 16, 22, 42, 61, 81]
    record = classify(obs(read_bytes=0, total_bytes=total), record, 40.0, 900)  # empty cgroup
    assert record["state"] == "loading" and record["progress"]["percent"] == 81
    record = classify(obs(read_bytes=1200 * 10**6, total_bytes=total), record, 44.0, 900)
    assert record["progress"]["percent"] == 81  # one process of two left
    record = classify(obs(read_bytes=1800 * 10**6, total_bytes=total), record, 48.0, 900)
    assert record["progress"]["percent"] == 85


def test_an_empty_cgroup_has_no_reads_to_count(monkeypatch, tmp_path):
    """A unit whose processes are all gone is not a unit that read 0 bytes."""
    group = tmp_path / "system.slice" / "sglang@gpu0.service"
    group.mkdir(parents=True)
    (group / "cgroup.procs").write_text("")
    monkeypatch.setattr(probes, "CGROUP_ROOTS", (str(tmp_path),))
    assert probes.io_counters("/system.slice/sglang@gpu0.service") == (None, None)
    (group / "cgroup.procs").write_text(f"{os.getpid()}\n")
    read, chars = probes.io_counters("/system.slice/sglang@gpu0.service")
    assert read is not None and chars > 0


def test_a_model_under_a_megabyte_reads_in_kilobytes():
    """The lab's tiny Llama (about 400 kB of weights) once read "100% (0/0 MB, 0 MB/s)"."""
    total = 420_000
    record = classify(obs(read_bytes=0, total_bytes=total), None, 0.0, 900)
    record = classify(obs(read_bytes=210_000, total_bytes=total), record, 2.0, 900)
    assert record["label"] == "loading 50% (210/420 kB, 105 kB/s, ETA 2s)"


def test_the_rate_is_timed_when_the_counters_were_read():
    """Issue 44's CI: a steady 20 MB/s load read 24.7 MB/s when the looks' counters were read
    seconds after the looks began (systemctl and the journal first, on two busy cores) and the
    samples were stamped with the looks' start. Stamped when read, the rate is the read's."""
    total, rate, record, read_at = 2 * GB, 20 * 10**6, None, 0.0
    for look in range(30):
        began = read_at + 1.0  # a look begins a poll after the last one ended
        lag = 3.0 if look % 4 == 3 else 0.1  # every fourth look's counters read 3 s late
        read_at = began + lag
        record = classify(obs(read_bytes=int(rate * read_at), total_bytes=total,
                              read_at=read_at), record, began, 900)
        if look >= 6:
            assert abs(record["progress"]["rate_bps"] / rate - 1) < 0.01, (look, record)


def test_percent_only_rises_and_the_eta_converges_on_a_steady_read():
    total = 10 * GB
    record, percents, etas = None, [], []
    for t in range(0, 100):
        read = min(total, 100 * 10**6 * t)
        record = classify(obs(read_bytes=read, total_bytes=total), record, float(t), 900, 20)
        percents.append(record["progress"]["percent"])
        if record["progress"]["eta_s"] is not None:
            etas.append(record["progress"]["eta_s"] + t)  # the predicted end time
    assert percents == sorted(percents) and percents[-1] == 99
    assert all(abs(end - 100) <= 1 for end in etas), etas


def test_a_slow_load_that_moves_is_never_hung():
    total = 547 * GB
    record = None
    for t in range(0, 3000, 10):  # 1 MB/s, for 50 minutes, stall timeout 60 s
        record = classify(obs(read_bytes=10**6 * t, total_bytes=total), record, float(t), 60)
        assert record["state"] == "loading", record


def test_flat_reads_with_the_weights_in_page_cache_say_cached():
    total = 80 * GB
    record = classify(obs(read_bytes=10**6, total_bytes=total), None, 0.0, 900)
    for t in range(1, 40):
        shards = [t * 2, 82] if t > 20 else None
        record = classify(obs(read_bytes=10**6, total_bytes=total, resident_bytes=total,
                              shards=shards, log_count=5 + t), record, float(t), 900)
    assert record["progress"]["cached"]
    assert record["label"] == "loading cached, shards 78/82"
    assert record["progress"]["percent"] == 95
    # flat reads with the weights not in page cache stay a percent (a slow disk, not a cache)
    record = classify(obs(read_bytes=10**6, total_bytes=total, resident_bytes=0), record, 41.0,
                      900)
    assert not record["progress"]["cached"]


def test_shard_lines_of_sglangs_loader():
    lines = [
        "Loading safetensors checkpoint shards:  43% Completed | 35/82 [01:02<01:20,  1.1it/s]",
        "Multi-thread loading shards:   0% Completed | 0/82 [00:00<?, ?it/s]\r"
        "Multi-thread loading shards:  12% Completed | 10/82 [00:09<01:05,  1.1it/s]\r",
        "[2026-12-02 10:00:00] Load weight end.",
    ]
    assert load_progress.shard_progress(lines) == [10, 82]
    assert load_progress.shard_progress(lines[:1]) == [35, 82]
    assert load_progress.shard_progress(["nothing"]) is None


def test_weight_files_from_the_index_else_the_folder(tmp_path):
    model = tmp_path / "m"
    model.mkdir()
    for name, size in (("a.safetensors", 10), ("b.safetensors", 20), ("stale.safetensors", 5)):
        (model / name).write_bytes(b"x" * size)
    assert len(load_progress.weight_files(str(model))) == 3
    index = {"weight_map": {"w1": "a.safetensors", "w2": "b.safetensors", "w3": "b.safetensors"}}
    (model / "model.safetensors.index.json").write_text(json.dumps(index))
    files = load_progress.weight_files(str(model))
    assert [f.rsplit("/", 1)[1] for f in files] == ["a.safetensors", "b.safetensors"]
    draft = tmp_path / "draft"
    draft.mkdir()
    (draft / "model.bin").write_bytes(b"y" * 7)
    instance = {"model_path": str(model),
                "argv": ["--speculative-draft-model-path", str(draft)]}
    assert load_progress.total_size(load_progress.instance_weight_files(instance)) == 37


def test_hybrid_cgroup_hierarchies_are_read(monkeypatch, tmp_path):
    """On a cgroup v1 host (LXC containers there) the unit's processes are in systemd's tree."""
    root = tmp_path / "systemd"
    (root / "system.slice" / "sglang@gpu0.service").mkdir(parents=True)
    (root / "system.slice" / "sglang@gpu0.service" / "cgroup.procs").write_text("1\n2\n")
    monkeypatch.setattr(probes, "CGROUP_ROOTS", (str(tmp_path / "none"), str(root)))
    assert probes.cgroup_pids("/system.slice/sglang@gpu0.service") == ["1", "2"]


def test_the_rate_starts_when_reads_start():
    """Twenty flat seconds (the imports) then 40 MB/s: the rate is 40 MB/s from the start."""
    total, record = 2 * GB, None
    for t in range(0, 30):
        read = 0 if t <= 20 else 40 * 10**6 * (t - 20)
        record = classify(obs(read_bytes=read, total_bytes=total), record, float(t), 900)
    assert record["progress"]["rate_bps"] == 40 * 10**6


def test_rounds_publish_progress_as_fields_and_a_summary(monkeypatch):
    monkeypatch.setattr(readiness, "total_size", lambda files: 10 * GB)

    def script(name, t):
        if name == "gpu0":
            return obs(port_open=True, http_status=200, model_listed=True)
        return obs(read_bytes=int(t * GB / 10), log_count=int(t))

    result = rounds(monkeypatch, script, interval=6.0)[0]
    gpu1 = next(p for p in result["progress"] if p["name"] == "gpu1")
    assert gpu1["state"] == "loading" and gpu1["total_bytes"] == 10 * GB
    assert gpu1["rate_bps"] == GB // 10 and gpu1["percent"] == 6
    assert result["summary"].startswith("1/2 healthy; gpu1 loading 6% (0.6/10.0 GB, 100 MB/s")
    gpu0 = next(p for p in result["progress"] if p["name"] == "gpu0")
    assert gpu0 == {"name": "gpu0", "state": "healthy", "elapsed_s": gpu0["elapsed_s"]}
    assert "LOAD" in result["table"][0] and "6% (0.6/10.0 GB" in result["table"][2]


def test_a_crash_keeps_where_the_load_was():
    record = classify(obs(read_bytes=0, total_bytes=10 * GB), None, 0.0, 900)
    record = classify(obs(read_bytes=4 * GB, total_bytes=10 * GB), record, 10.0, 900)
    crashed = classify(obs(read_bytes=0, total_bytes=10 * GB, crash="killed"), record, 11.0, 900)
    assert crashed["state"] == "crashed"
    assert crashed["progress"]["percent"] == 40


def test_weights_cached_before_the_load_count_as_done():
    """A restart after a crash: 80% of the weights are still in the page cache; the rest reads
    from disk, and the percent and ETA say so (not 20% read of 100% to go)."""
    total, record = 10 * GB, None
    for t in range(0, 20):
        read = 0 if t < 5 else 100 * 10**6 * (t - 5)
        record = classify(obs(read_bytes=read, total_bytes=total, cached_at_start=8 * GB),
                          record, float(t), 900)
    progress = record["progress"]
    assert progress["percent"] == 94 and progress["cached_bytes"] == 8 * GB
    assert progress["eta_s"] == 6
    assert record["label"] == "loading 94% (9.4/10.0 GB, 100 MB/s, ETA 6s, 8.0 GB cached)"


def test_no_eta_while_only_the_libraries_are_read():
    total, record = 547 * GB, None
    for t in range(0, 30):  # imports: 20 MB/s of libraries, 0.6 GB in 30 s
        record = classify(obs(read_bytes=20 * 10**6 * t, total_bytes=total), record, float(t), 900)
    assert record["progress"]["eta_s"] is None
    assert record["label"] == "loading 0% (1/547 GB, 20 MB/s)"


def test_cpu_instances_say_cpu_where_gpus_would_be():
    assert readiness.where({"gpus": [0, 1]}) == "GPU 0,1"
    assert readiness.where({"gpus": [], "device": "cpu"}) == "CPU"
    (_header, row) = readiness.render_table(
        [{"name": "cpu0", "gpus": [], "port": 30000, "http_status": 200, "state": "healthy"}]
    )
    assert row.split()[:3] == ["cpu0", "cpu", "30000"]


def test_an_instance_that_answers_healthy_is_not_read_further(monkeypatch):
    """The no-op rerun's look: an active unit answering /health and listing its model costs no
    journal, no I/O counters and no weight files; one that does not answer gets them all."""
    read = []
    monkeypatch.setattr(probes, "systemctl_show", lambda unit: {
        "ActiveState": "active", "SubState": "running", "NRestarts": "0", "InvocationID": "i1",
        "ControlGroup": "/system.slice/x", "MainPID": "42"})
    monkeypatch.setattr(probes, "journal", lambda *a: read.append("journal") or ["line"])
    monkeypatch.setattr(probes, "io_counters", lambda cg: read.append("io") or (1, 2))
    monkeypatch.setattr(probes, "port_open", lambda host, port: True)
    answers = {"/health": (200, b""), "/v1/models": (200, b'{"data": [{"id": "tiny"}]}'),
               "/server_info": (200, SERVER_INFO)}
    monkeypatch.setattr(probes, "http_get", lambda host, port, path, key: answers[path])

    class NoGpu:
        def used_mib(self, gpus):
            return None

    instance = {"unit": "sglang@cpu0.service", "gpus": [], "probe_host": "127.0.0.1",
                "port": 30000, "served_model_name": "tiny"}
    seen = probes.observe(instance, None, "", NoGpu())
    assert read == [], seen
    assert seen["answered"], seen
    assert seen["resolved"]["attention_backend"] == "torch_native"
    assert classify(seen, None, 0.0, 900)["state"] == "healthy"
    answers["/health"] = (503, "")
    seen = probes.observe(instance, None, "", NoGpu())
    assert not seen["answered"] and read == ["journal", "io"]
    assert seen["log_count"] == 1


def test_an_invocation_that_generated_a_token_is_asked_its_scheduler(monkeypatch, tmp_path):
    """/health (a generated token, a second at the earliest) once per start of the unit; later
    looks at the same invocation ask /server_info (the scheduler's loop, milliseconds). A restart
    (a new InvocationID) or an answer but 200 sends the look back to /health."""
    show = {"ActiveState": "active", "SubState": "running", "NRestarts": "0",
            "InvocationID": "i1", "ControlGroup": "/system.slice/x", "MainPID": "42"}
    monkeypatch.setattr(probes, "systemctl_show", lambda unit: dict(show))
    monkeypatch.setattr(probes, "journal", lambda *a: ["line"])
    monkeypatch.setattr(probes, "io_counters", lambda cg: (1, 2))
    monkeypatch.setattr(probes, "port_open", lambda host, port: True)
    asked = []
    answers = {"/health": (200, b""), "/server_info": (200, SERVER_INFO),
               "/v1/models": (200, b'{"data": [{"id": "tiny"}]}')}

    def get(host, port, path, key):
        asked.append((path, key))
        return answers[path]

    monkeypatch.setattr(probes, "http_get", get)

    class NoGpu:
        def used_mib(self, gpus):
            return None

    instance = {"unit": "sglang@cpu0.service", "gpus": [], "probe_host": "127.0.0.1",
                "port": 30000, "served_model_name": "tiny"}
    where = str(tmp_path / "proven")

    def look():
        asked.clear()
        seen = probes.observe(instance, None, "k", NoGpu(), proven_dir=where)
        return seen, [path for path, _key in asked]

    seen, paths = look()
    # /health proves the start; /server_info then tells what SGLang resolved (once per start)
    assert paths == ["/health", "/v1/models", "/server_info"] and seen["answered"]
    assert "proven_at" not in seen
    assert json.loads((tmp_path / "proven/sglang@cpu0.service.json").read_text())[
        "invocation"] == "i1"
    assert seen["resolved"]["attention_backend"] == "torch_native"
    seen, paths = look()
    assert paths == ["/server_info", "/v1/models"] and seen["answered"], seen
    assert ("/server_info", "k") in asked  # behind the API key, like /v1/models
    # the rerun's look: the one /server_info answer tells what SGLang resolved, no more asked
    assert seen["resolved"]["attention_backend"] == "torch_native"
    detail = classify(seen, None, 0.0, 900)["detail"]
    assert detail.startswith("ready (scheduler answers; /health generated a token at "), detail
    answers["/server_info"] = (None, b"")  # the scheduler does not answer: not healthy ...
    seen, paths = look()
    assert paths == ["/server_info"] and not seen["answered"]
    answers["/server_info"] = (200, SERVER_INFO)
    seen, paths = look()  # ... and the next look asks /health again
    assert paths == ["/health", "/v1/models", "/server_info"] and seen["answered"]
    show["InvocationID"] = "i2"  # restarted: its new run has generated nothing yet
    seen, paths = look()
    assert paths[0] == "/health"
    seen = probes.observe(instance, None, "k", NoGpu())  # no proven_dir: /health every time
    assert [path for path, _key in asked[-3:]] == ["/health", "/v1/models", "/server_info"]


def test_a_round_looks_at_every_instance_at_once(monkeypatch):
    """SGLang's /health answers after a second at the earliest: the instances are observed side
    by side. Each look here waits for the other at a barrier, which only a concurrent round
    passes (one after the other, the barrier breaks)."""
    import threading

    barrier = threading.Barrier(2, timeout=10)

    def script(name, t):
        barrier.wait()
        return obs(port_open=True, http_status=200, model_listed=True, answered=True)

    result = rounds(monkeypatch, script)[0]
    assert result["outcome"] == "healthy", result
    assert [p["state"] for p in result["progress"]] == ["healthy", "healthy"]


# ------------------------------------------------------------------ what SGLang resolved
def test_what_sglang_resolved_is_read_from_its_server_info():
    """The field names are SGLang 0.5.12's ServerArgs fields; the scheduler's own values
    (internal_states) come first: it resolved prefill and decode too, the top level says null."""
    info = json.loads(SERVER_INFO)
    assert info["version"] == "0.5.12"
    assert info["attention_backend"] == "torch_native" and info["prefill_attention_backend"] is None
    resolved = probes.resolved_settings(SERVER_INFO)
    assert resolved == {
        "attention_backend": "torch_native",
        "prefill_attention_backend": "torch_native",
        "decode_attention_backend": "torch_native",
        "moe_runner_backend": "auto",
        "quantization": None,
    }
    assert "api_key" not in resolved  # the answer holds the key; only these fields are kept
    assert readiness.describe_resolved(resolved) == (
        "attention torch_native, moe auto, quantization from the checkpoint")
    top = {k: v for k, v in info.items() if k != "internal_states"}
    assert probes.resolved_settings(json.dumps(top))["prefill_attention_backend"] is None
    assert probes.resolved_settings(b"not json") is None
    assert probes.resolved_settings(b"{}") is None
    assert probes.resolved_settings(b"[]") is None


def test_a_split_attention_backend_and_a_quantization_are_named():
    assert readiness.describe_resolved({
        "attention_backend": "triton", "prefill_attention_backend": "fa4",
        "decode_attention_backend": "triton", "moe_runner_backend": "triton",
        "quantization": "w4afp8"}) == (
        "attention triton (prefill fa4), moe triton, quantization w4afp8")
    assert readiness.describe_resolved(None) == ""


def test_the_report_and_the_checklist_say_what_sglang_resolved(monkeypatch):
    resolved = probes.resolved_settings(SERVER_INFO)

    def script(name, t):
        if t < 3:
            return obs(log_count=int(t))
        return obs(port_open=True, http_status=200, model_listed=True, resolved=resolved)

    results = rounds(monkeypatch, script, recovered=RECOVERED)
    first, last = results[0], results[-1]
    assert "attention" not in first["report"][1]  # not known while loading
    assert last["outcome"] == "healthy"
    line = last["report"][1]
    assert line.startswith("  sglang@gpu0.service (GPU 0, port 30000): healthy for ")
    assert line.endswith(" - ready; attention torch_native, moe auto, quantization from the "
                         "checkpoint")
    assert last["report"][2].endswith(
        "- ready; attention torch_native, moe auto, quantization from the checkpoint; "
        "restarted: it had crashed 12 s before this run (exit status 9); "
        "last log: Scheduler hit an exception")
    assert last["instances"][0]["resolved"] == resolved
    assert last["checklist"] == (
        "2/2 healthy; gpu0, gpu1: attention torch_native, moe auto, quantization from the "
        "checkpoint; gpu1 restarted: it had crashed 12 s before this run (exit status 9)")
    # a later round (the state passed back) keeps it without another look
    again = readiness.classify(obs(port_open=True, http_status=200, model_listed=True),
                               {"resolved": resolved}, 0.0, 900)
    assert again["resolved"] == resolved


def test_instances_that_resolved_differently_each_get_their_phrase():
    rows = [
        {"name": "gpu0", "resolved": {"attention_backend": "flashinfer",
                                      "moe_runner_backend": "auto", "quantization": "fp8"}},
        {"name": "gpu1", "resolved": {"attention_backend": "flashinfer",
                                      "moe_runner_backend": "auto", "quantization": "fp8"}},
        {"name": "kimi", "resolved": {"attention_backend": "triton",
                                      "moe_runner_backend": "auto", "quantization": None}},
        {"name": "down"},
    ]
    assert readiness.resolved_lines(rows) == [
        "gpu0, gpu1: attention flashinfer, moe auto, quantization fp8",
        "kimi: attention triton, moe auto, quantization from the checkpoint",
    ]


def test_a_quoted_tail_keeps_one_update_of_each_progress_bar():
    """The 20 journal lines of an instance killed mid-load (recorded in the lab's CI): fifteen
    updates of SGLang's shard bar. The quote keeps the last update after a line saying how many
    were left out, and so has room for the lines before them."""
    killed = (Path(__file__).parent / "recordings" / "journal_killed_mid_load.log").read_text()
    killed = killed.splitlines()
    earlier = [
        "Load weight begin. avail mem=20.00 GB",
        "Using model weights format ['*.safetensors']",
    ]
    quoted = readiness.quoted_tail(earlier + killed, 20)
    assert quoted == [
        *earlier,
        killed[0],  # systemd's exit line, its kills (one per process), the blank line journald
        "(1 earlier line like the next, one per process, left out)",  # ended the stream with
        *killed[2:4],
        "(14 earlier updates of this bar left out)",
        "Multi-thread loading shards:  35% Completed | 14/40 [00:53<01:08,  2.63s/it]",
        "sglang@cpu0.service: Failed with result 'signal'.",
    ]
    assert readiness.quoted_tail(earlier + killed, 3) == quoted[-3:]
    assert readiness.quoted_tail(killed, 0) == []


def test_systemds_line_for_each_signalled_process_is_quoted_once():
    """CI on 53d7f62: `systemctl kill -s KILL` of a loading unit logged one line per process
    (17), then the exit and two more kills, and the 20 quoted lines held nothing of SGLang's."""
    killed = (Path(__file__).parent / "recordings"
              / "journal_killed_each_process_signalled.log").read_text().splitlines()
    earlier = ["Load weight begin. avail mem=20.00 GB",
               "Using model weights format ['*.safetensors']"]
    quoted = readiness.quoted_tail(earlier + killed, 20)
    assert quoted == [
        *earlier,
        "(16 earlier lines like the next, one per process, left out)",
        killed[16],  # the last "Sending signal SIGKILL to process ... on client request."
        "sglang@cpu0.service: Main process exited, code=killed, status=9/KILL",
        "(1 earlier line like the next, one per process, left out)",
        "sglang@cpu0.service: Killing process 895 (sglang::schedul) with signal SIGKILL.",
    ]
    # another unit's, another signal's, or a stop's (no "on client request") lines are runs of
    # their own
    lines = ["a.service: Sending signal SIGTERM to process 1 (x) on client request.",
             "a.service: Sending signal SIGKILL to process 2 (x) on client request.",
             "b.service: Sending signal SIGKILL to process 3 (x) on client request.",
             "b.service: Sending signal SIGKILL to process 4 (x)."]
    assert readiness.quoted_tail(lines, 20) == lines


def test_only_a_run_of_one_bar_is_cut():
    """Two bars one after the other (tqdm's own format and SGLang's) each keep their last update;
    a bar's single update and lines that only look alike stay as they are."""
    lines = [
        "Loading safetensors checkpoint shards:  50% Completed | 1/2 [00:01<00:01,  1.00it/s]",
        "Loading safetensors checkpoint shards: 100% Completed | 2/2 [00:02<00:00,  1.00it/s]",
        "Capturing batches (bs=4):  10%|█         | 1/10 [00:01<00:09]",
        "Capturing batches (bs=4):  20%|██        | 2/10 [00:02<00:08]",
        "Capturing batches (bs=4):  30%|███       | 3/10 [00:03<00:07]",
        "Prefill batch: 100% of the budget used",
        "Prefill batch: 100% of the budget used",
        "Decode:  50% Completed | 1/2",
    ]
    assert readiness.quoted_tail(lines, 20) == [
        "(1 earlier update of this bar left out)",
        lines[1],
        "(2 earlier updates of this bar left out)",
        lines[4],
        *lines[5:],
    ]
