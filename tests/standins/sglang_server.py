#!/usr/bin/env python3
"""Stand-in for ``python -m sglang.launch_server`` (and ``sglang_router.launch_router``).

Standard library only. It accepts the flags the sglang_serve units pass (``--config FILE`` too, for
the API key) and ignores unknown ones, then behaves like SGLang starting up:

1. "loading": SGLang-like log lines while loading weight shards, port closed
   (``--standin-load-seconds`` / ``SGLANG_STANDIN_LOAD_SECONDS``, default 3);
2. "warmup": port open, ``/health`` answers 503 (``SGLANG_STANDIN_WARMUP_SECONDS``, default 2);
3. ready: ``/health`` 200, ``/v1/models`` lists the served name (API key checked when given),
   and the log line "The server is fired up and ready to roll!".

Modes (``--standin-mode`` / ``SGLANG_STANDIN_MODE``): ``ok`` (default), ``hang`` (stops logging
halfway through loading and sleeps forever with the port closed), ``crash`` (exits 1 halfway
through loading with a traceback-like message).

Router mode: given ``--worker-urls``, it acts like sglang-router: ``/health`` and ``/readiness``
answer 200 once at least one worker answers ``/health`` 200.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socketserver
import sys
import threading
import time
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer


def log(message: str) -> None:
    stamp = time.strftime("%Y-%m-%d %H:%M:%S")
    print(f"[{stamp}] {message}", flush=True)


def config_args(argv: list[str]) -> list[str]:
    """``--config FILE`` as SGLang 0.5.12 takes it (ConfigArgumentMerger): the file's options go
    before the command line's (the command line wins), and the file never reaches argv.

    The role writes one ``key: <JSON scalar>`` per line (YAML that JSON's reader can take), so
    this stand-in needs no YAML library; SGLang's own reader is tested on the same file in the
    lab (tests/integration/jit)."""
    if "--config" not in argv:
        return argv
    index = argv.index("--config")
    options: list[str] = []
    with open(argv[index + 1], encoding="utf-8") as handle:
        for line in handle:
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            key, _, value = line.partition(":")
            options += [f"--{key.strip()}", str(json.loads(value.strip()))]
    return options + argv[:index] + argv[index + 2 :]


def parse(argv: list[str]) -> argparse.Namespace:
    argv = config_args(argv)
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model-path", "--model", default="standin-model")
    parser.add_argument("--served-model-name", default=None)
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=30000)
    parser.add_argument("--tp", "--tp-size", "--tensor-parallel-size", type=int, default=1)
    parser.add_argument("--api-key", default=None)
    parser.add_argument("--attention-backend", default=None)
    parser.add_argument("--mem-fraction-static", type=float, default=None)
    parser.add_argument("--context-length", type=int, default=None)
    parser.add_argument("--worker-urls", nargs="*", default=None)
    parser.add_argument("--policy", default="cache_aware")
    parser.add_argument(
        "--standin-mode",
        default=os.environ.get("SGLANG_STANDIN_MODE", "ok"),
        choices=["ok", "hang", "crash"],
    )
    parser.add_argument(
        "--standin-load-seconds",
        type=float,
        default=float(os.environ.get("SGLANG_STANDIN_LOAD_SECONDS", "3")),
    )
    parser.add_argument(
        "--standin-warmup-seconds",
        type=float,
        default=float(os.environ.get("SGLANG_STANDIN_WARMUP_SECONDS", "2")),
    )
    args, unknown = parser.parse_known_args(argv)
    args.unknown = unknown
    args.served_model_name = args.served_model_name or args.model_path.rstrip("/").split("/")[-1]
    return args


class State:
    def __init__(self, args: argparse.Namespace) -> None:
        self.args = args
        self.ready = False

    def worker_healthy(self, url: str) -> bool:
        try:
            with urllib.request.urlopen(f"{url}/health", timeout=2) as response:
                return response.status == 200
        except OSError:
            return False

    def router_ready(self) -> bool:
        return any(self.worker_healthy(url) for url in self.args.worker_urls or [])


def make_handler(state: State) -> type[BaseHTTPRequestHandler]:
    args = state.args

    class Handler(BaseHTTPRequestHandler):
        def log_message(self, format: str, *values: object) -> None:
            log(f"{self.address_string()} {format % values}")

        def reply(self, status: int, payload: object) -> None:
            body = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def do_GET(self) -> None:
            path = self.path.split("?", 1)[0]
            if args.worker_urls is not None:
                ok = state.router_ready()
                if path == "/workers":  # the shape sglang-router 0.3.2 answers (trimmed)
                    workers = [
                        {"url": url, "is_healthy": state.worker_healthy(url)}
                        for url in args.worker_urls
                    ]
                    self.reply(200, {"workers": workers, "total": len(workers)})
                elif path in ("/health", "/readiness", "/liveness"):
                    self.reply(
                        200 if ok else 503, {"workers": args.worker_urls, "policy": args.policy}
                    )
                else:
                    self.reply(404, {"error": "not found"})
                return
            if path.startswith("/health"):
                self.reply(200 if state.ready else 503, {"ready": state.ready})
                return
            if path == "/metrics":
                self.reply(200, {"standin": True})
                return
            if args.api_key and self.headers.get("Authorization") != f"Bearer {args.api_key}":
                self.reply(401, {"error": "Unauthorized"})
                return
            if path == "/v1/models":
                self.reply(
                    200,
                    {
                        "object": "list",
                        "data": [
                            {
                                "id": args.served_model_name,
                                "object": "model",
                                "owned_by": "sglang",
                                "root": args.model_path,
                            }
                        ],
                    },
                )
                return
            if path == "/get_model_info":
                self.reply(200, {"model_path": args.model_path, "tp": args.tp})
                return
            self.reply(404, {"error": "not found"})

    return Handler


class Server(ThreadingHTTPServer):
    daemon_threads = True

    def server_bind(self) -> None:
        # HTTPServer.server_bind resolves the host name (socket.getfqdn): seconds of DNS
        # timeouts in a container without a resolver. The real server does no such lookup.
        socketserver.TCPServer.server_bind(self)
        self.server_name, self.server_port = str(self.server_address[0]), self.server_address[1]


def serve(state: State) -> ThreadingHTTPServer:
    server = Server((state.args.host, state.args.port), make_handler(state))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    state = State(args)
    if args.worker_urls is not None:
        log(
            f"Starting router on {args.host}:{args.port} policy={args.policy} "
            f"workers={args.worker_urls}"
        )
        serve(state)
        log("Router is up")
        while True:
            time.sleep(3600)
    shown = {k: v for k, v in vars(args).items() if k != "api_key" and not k.startswith("standin")}
    log(f"server_args=ServerArgs({', '.join(f'{k}={v!r}' for k, v in shown.items())})")
    if args.unknown:
        log(f"standin: ignoring flags {args.unknown}")
    log(
        f"Init torch distributed begin. tp_size={args.tp} "
        f"CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', '')}"
    )
    log("Load weight begin. avail mem=94.50 GB")
    shards = 8
    for shard in range(1, shards + 1):
        time.sleep(args.standin_load_seconds / shards)
        log(
            f"Loading safetensors checkpoint shards: {shard * 100 // shards}% Completed "
            f"| {shard}/{shards}"
        )
        if shard == shards // 2 and args.standin_mode == "crash":
            log("Traceback (most recent call last):")
            log("torch.OutOfMemoryError: CUDA out of memory (standin crash mode)")
            return 1
        if shard == shards // 2 and args.standin_mode == "hang":
            while True:
                time.sleep(3600)
    log("Load weight end. type=StandinForCausalLM, avail mem=10.25 GB")
    serve(state)
    log(f"Uvicorn running on http://{args.host}:{args.port} (Press CTRL+C to quit)")
    time.sleep(args.standin_warmup_seconds)
    state.ready = True
    log("The server is fired up and ready to roll!")
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    sys.exit(main())
