"""A client of the router, and a watcher of what the router and its workers say, for the serving
tests' fault drills (tests/integration/serve/test_serve.py). Runs inside the lab container (the
router and the instances bind loopback) with the system python3, standard library only.

    python3 chaos_client.py KEY DIR [SECONDS]

Until DIR/stop appears (at most SECONDS), it
- sends one-token completions through the router, one after the other, and writes each to
  DIR/requests.jsonl as [sent, answered, ok, status] (time.monotonic(): the clock of systemd's
  *TimestampMonotonic properties and of the journal's monotonic stamps);
- every 0.25 s, writes to DIR/watch.jsonl what the router says of each worker:
  [time, {url: [is_healthy in GET /workers, circuit-breaker state (smg_worker_cb_state: 0
  closed, 1 open, 2 half-open), requests it sent there (smg_worker_cb_outcomes_total), the
  worker's own /health status or null when not asked]}]. A worker's own /health is asked only
  while the router does not count it healthy or its breaker is not closed (SGLang's /health
  generates a token: asking it all the time would load the instances);
- touches DIR/first at the first answered request.
Every failure of a request or a poll is recorded, never raised; the summary is printed however
the loop ends.
"""

from __future__ import annotations

import json
import os
import re
import sys
import threading
import time
import urllib.error
import urllib.request

ROUTER = "http://127.0.0.1:30080"
METRICS = "http://127.0.0.1:29000/metrics"
OPENER = urllib.request.build_opener(urllib.request.ProxyHandler({}))
CB_STATE = re.compile(r'^smg_worker_cb_state\{worker="([^"]+)"\} ([0-9.]+)$', re.M)
CB_OUTCOMES = re.compile(
    r'^smg_worker_cb_outcomes_total\{worker="([^"]+)",outcome="success"\} ([0-9.]+)$', re.M)


def status_of(request, timeout: float) -> tuple[int, bytes]:
    try:
        with OPENER.open(request, timeout=timeout) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as error:
        return error.code, b""
    except Exception:  # refused, reset, timed out: nothing answered
        return 0, b""


def watch(folder: str, stop: threading.Event, errors: list[str]) -> None:
    with open(os.path.join(folder, "watch.jsonl"), "w", buffering=1) as log:
        while not stop.is_set():
            now = time.monotonic()
            seen: dict[str, list] = {}
            try:
                status, body = status_of(ROUTER + "/workers", 5)
                for worker in (json.loads(body)["workers"] if status == 200 else []):
                    seen[worker["url"].rstrip("/")] = [bool(worker.get("is_healthy")), None, 0,
                                                       None]
                status, body = status_of(METRICS, 5)
                text = body.decode() if status == 200 else ""
                for url, value in CB_STATE.findall(text):
                    seen.setdefault(url, [None, None, 0, None])[1] = int(float(value))
                for url, value in CB_OUTCOMES.findall(text):
                    seen.setdefault(url, [None, None, 0, None])[2] = int(float(value))
                for url, entry in seen.items():
                    if entry[0] is not True or entry[1] not in (0, None):
                        entry[3] = status_of(url + "/health", 5)[0]
            except Exception as error:  # a bad answer: recorded, the watch goes on
                errors.append(type(error).__name__ + ": " + str(error)[:200])
            log.write(json.dumps([now, seen]) + "\n")
            stop.wait(max(0.0, 0.25 - (time.monotonic() - now)))


def main() -> None:
    key, folder = sys.argv[1], sys.argv[2]
    seconds = float(sys.argv[3]) if len(sys.argv) > 3 else 3600
    body = json.dumps({"model": "tiny", "prompt": "hello", "max_tokens": 1,
                       "temperature": 0}).encode()
    headers = {"Authorization": "Bearer " + key, "Content-Type": "application/json"}
    sent, failed, statuses, watch_errors = 0, 0, {}, []
    stop = threading.Event()
    watcher = threading.Thread(target=watch, args=(folder, stop, watch_errors), daemon=True)
    watcher.start()
    end = time.monotonic() + seconds
    try:
        with open(os.path.join(folder, "requests.jsonl"), "w", buffering=1) as log:
            while time.monotonic() < end and not os.path.exists(os.path.join(folder, "stop")):
                request = urllib.request.Request(ROUTER + "/v1/completions", data=body,
                                                 headers=headers)
                sent += 1
                began = time.monotonic()
                status = status_of(request, 60)[0]
                ok = status == 200
                failed += not ok
                statuses[str(status)] = statuses.get(str(status), 0) + 1
                log.write(json.dumps([began, time.monotonic(), ok, status]) + "\n")
                if ok and not os.path.exists(os.path.join(folder, "first")):
                    open(os.path.join(folder, "first"), "w").close()
                # pace: the instances' starts share the two cores with it (an outage: slower).
                # Each answered request is work for the router and an instance; at 0.05 s the
                # drills sent 500-600 of them (issue 44: CI's time is the cores' work)
                time.sleep(0.2 if ok else 0.5)
    finally:
        stop.set()
        watcher.join(timeout=10)
        print(json.dumps({"sent": sent, "failed": failed, "statuses": statuses,
                          "watch_errors": len(watch_errors),
                          "watch_error_samples": watch_errors[:3]}), flush=True)


if __name__ == "__main__":
    main()
