"""When sglang-router counts as ready, and what its readiness says (role sglang_router).

Ready is what a client gets: every worker it fronts listed healthy in GET /workers, and each
one-token completion through it answered 200. The answers are state_probe's ``http`` (the role's
probe, or readiness's own polls): ``/workers`` under the router's URL, each completion under
"completion <model>". Unit-tested in tests/unit/serve/test_router_readiness.py.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

COMPLETION = "completion "


def healthy_workers(answer: Mapping[str, Any], router_url: str) -> list[str]:
    """The worker URLs (no trailing slash) GET /workers lists healthy, in its order."""
    workers = ((answer.get(f"{router_url}/workers") or {}).get("json") or {}).get("workers")
    out = []
    for worker in workers or []:
        url = str(worker.get("url", "")).rstrip("/")
        if worker.get("is_healthy") and url and url not in out:
            out.append(url)
    return out


def completions(answer: Mapping[str, Any]) -> dict[str, Mapping[str, Any]]:
    """model -> its completion's answer ({status, elapsed, json, msg})."""
    return {name[len(COMPLETION):]: value for name, value in answer.items()
            if name.startswith(COMPLETION)}


def _http(result: Mapping[str, Any]) -> Mapping[str, Any]:
    return result.get("http") or {} if isinstance(result, Mapping) else {}


def router_ready(result: Mapping[str, Any], wanted: Sequence[str], router_url: str) -> bool:
    """Every wanted worker healthy, and at least one completion, each answered 200."""
    answer = _http(result)
    done = completions(answer)
    wanted = {str(url).rstrip("/") for url in wanted}
    return (wanted <= set(healthy_workers(answer, router_url)) and bool(done)
            and all(value.get("status") == 200 for value in done.values()))


def router_verdict(result: Mapping[str, Any], workers: Sequence[str], router_url: str) -> str:
    """'2/2 workers healthy; a completion through the router in 0.1 s' (0.04 s: two figures
    under a tenth; one per model, named when there are several), or what fell short."""
    answer = _http(result)
    wanted = [str(url).rstrip("/") for url in workers]
    healthy = [url for url in healthy_workers(answer, router_url) if url in wanted]
    parts = [f"{len(healthy)}/{len(wanted)} workers healthy"]
    done = completions(answer)
    for model, value in sorted(done.items()):
        named = f" of {model}" if len(done) > 1 else ""
        if value.get("status") == 200:
            elapsed = float(value.get("elapsed") or 0)
            parts.append(f"a completion{named} through the router in "
                         f"{elapsed:.1f} s" if elapsed >= 0.095 else
                         f"a completion{named} through the router in {elapsed:.2f} s")
        else:
            why = value.get("msg") or f"HTTP {value.get('status')}"
            parts.append(f"a completion{named} through the router failed: {why}")
    if not done:
        parts.append("no completion was sent")
    return "; ".join(parts)
