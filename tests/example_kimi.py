"""inventory/example's serving container as the validate checks get it: ct200 on kpro6 (all eight
GPUs), one TP-8 instance of Kimi-K2.5 (tests/unit/validate: the SM120 and fabric checks)."""

SERVE = {
    "sglang_serve_enabled": True,
    "sglang_serve_model_store": "/srv/models",
    "sglang_serve_model_path": "Kimi-K2.5",
    "sglang_serve_port_base": 30000,
    "sglang_serve_host": "127.0.0.1",
    "sglang_serve_instances": [{"name": "kimi-tp8", "gpus": [0, 1, 2, 3, 4, 5, 6, 7]}],
    "sglang_serve_gpus": [],
}
CT = {"node": "kpro6", "spec": {"name": "ct200", "gpus": "all"}}
