"""The router's readiness verdict (plugins/plugin_utils/router_readiness.py), on answers as
state_probe returns them: GET /workers of sglang-router 0.3.2 and completions through it."""

from __future__ import annotations

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.router_readiness import (
    router_ready,
    router_verdict,
)

URL = "http://127.0.0.1:30080"
WORKERS = ["http://127.0.0.1:30000", "http://127.0.0.1:30001/"]


def answer(healthy=(True, True), completions=None):
    workers = [{"url": url.rstrip("/"), "is_healthy": ok, "model_id": "tiny"}
               for url, ok in zip(WORKERS, healthy, strict=True)]
    http = {f"{URL}/workers": {"status": 200, "json": {"workers": workers}, "msg": "",
                                "elapsed": 0.002}}
    for model, value in (completions if completions is not None
                         else {"tiny": {"status": 200, "elapsed": 0.123}}).items():
        http[f"completion {model}"] = {"json": None, "msg": "", **value}
    return {"changed": False, "http": http}


def test_ready_when_every_worker_is_healthy_and_the_completion_answered():
    result = answer()
    assert router_ready(result, WORKERS, URL)
    assert router_verdict(result, WORKERS, URL) == (
        "2/2 workers healthy; a completion through the router in 0.1 s")


def test_healthy_workers_are_not_enough_the_breakers_open():
    """GET /workers lists both healthy while their circuit breakers are open: 503 for the
    client, so not ready (issue 41)."""
    result = answer(completions={"tiny": {"status": 503, "elapsed": 0.004}})
    assert not router_ready(result, WORKERS, URL)
    assert router_verdict(result, WORKERS, URL) == (
        "2/2 workers healthy; a completion through the router failed: HTTP 503")


def test_a_worker_not_healthy_or_not_listed_is_not_ready():
    assert not router_ready(answer(healthy=(True, False)), WORKERS, URL)
    assert router_verdict(answer(healthy=(True, False)), WORKERS, URL).startswith(
        "1/2 workers healthy; ")
    nothing = {"http": {f"{URL}/workers": {"status": 0, "json": None, "msg": "refused"}}}
    assert not router_ready(nothing, WORKERS, URL)
    assert router_verdict(nothing, WORKERS, URL) == "0/2 workers healthy; no completion was sent"


def test_no_completion_sent_is_not_ready_and_each_model_is_named():
    assert not router_ready(answer(completions={}), WORKERS, URL)
    two = answer(completions={"a": {"status": 200, "elapsed": 0.05},
                              "b": {"status": 0, "elapsed": 60.0, "msg": "timed out"}})
    assert not router_ready(two, WORKERS, URL)
    assert router_verdict(two, WORKERS, URL) == (
        "2/2 workers healthy; a completion of a through the router in 0.05 s; "
        "a completion of b through the router failed: timed out")


def test_a_skipped_or_missing_result_is_not_ready():
    assert not router_ready({"skipped": True}, WORKERS, URL)
    assert not router_ready(None, WORKERS, URL)
