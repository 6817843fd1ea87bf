"""State classification of the sglang_readiness module (no systemd, no network)."""

from __future__ import annotations

from serve_helpers import readiness

classify = readiness.classify
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
    crashed = readiness.unit_crashed
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
            },
        ]
    )
    assert table[0].split() == ["INSTANCE", "GPU", "PORT", "MEMORY", "HTTP", "STATE"]
    assert table[1].split() == ["gpu0", "0", "30000", "84.7", "GiB", "200", "healthy"]
    assert table[2].split() == ["tp2", "1,2", "30001", "n/a", "-", "loading"]


def test_models_listed():
    assert readiness.models_listed(b'{"data": [{"id": "m"}]}', "m")[0]
    listed, why = readiness.models_listed(b'{"data": [{"id": "x"}]}', "m")
    assert not listed
    assert "not m" in why


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def time(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds


def rounds(monkeypatch, script, stall=10.0, timeout=100.0, interval=2.0):
    """Run rounds of run_round; ``script(name, t)`` returns the observation at time t."""
    clock = Clock()
    monkeypatch.setattr(readiness.time, "time", clock.time)
    monkeypatch.setattr(readiness.time, "sleep", clock.sleep)
    monkeypatch.setattr(readiness, "Nvml", lambda: None)
    monkeypatch.setattr(readiness, "journal_tail", lambda unit, n: [f"{unit} tail line"])
    start = clock.now
    monkeypatch.setattr(
        readiness, "observe", lambda inst, base, key, nvml: script(inst["name"], clock.now - start)
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


def test_rounds_overall_timeout(monkeypatch):
    results = rounds(monkeypatch, lambda name, t: obs(log_count=int(t)), stall=1000, timeout=20)
    assert results[-1]["outcome"] == "timeout"
    assert "timeout 20s" in results[-1]["msg"]
