"""The router's inputs: arguments systemd would alter, its bind address without a key, its port.

Part of the validation pass (action ``sglang_lxc_validate``); unit-tested in tests/unit/validate.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_common import (
    problem,
    truthy,
)

SYSTEMD_UNSAFE = re.compile(r"[$%;'\"`\\\n\r]")


def router_problems(host: str, values: Mapping[str, Any], instances: list) -> list[str]:
    if not truthy(values.get("sglang_router_enabled", False)):
        return []
    out = []
    for var in ("sglang_router_extra_args", "sglang_router_launch_command"):
        for arg in values.get(var) or []:
            if SYSTEMD_UNSAFE.search(str(arg)):
                out.append(problem(
                    host, var, arg,
                    "holds a character systemd's ExecStart would substitute or split "
                    "($, %, ;, quotes, backslash, line break)",
                    "pass plain arguments (one list entry each, without those characters)",
                ))
    for var in ("sglang_router_host", "sglang_router_policy"):
        if SYSTEMD_UNSAFE.search(str(values.get(var, ""))) or " " in str(values.get(var, "")):
            out.append(problem(host, var, values.get(var), "is not a plain word",
                               "use a plain value (an address, a policy name)"))
    rhost = values.get("sglang_router_host", "127.0.0.1")
    if rhost not in ("127.0.0.1", "::1", "localhost") and not truthy(
        values.get("sglang_router_allow_insecure_bind", False)
    ):
        out.append(
            problem(
                host,
                "sglang_router_host",
                rhost,
                "is not a loopback address and the router has no key",
                "bind 127.0.0.1, or set sglang_router_allow_insecure_bind: true",
            )
        )
    port = values.get("sglang_router_port")
    try:
        port = int(port)
    except (TypeError, ValueError):
        return out  # the type check reports it
    if not 1 <= port <= 65535:
        out.append(
            problem(
                host,
                "sglang_router_port",
                port,
                "outside 1-65535",
                "pick a free port such as 30080",
            )
        )
    for instance in instances:
        if instance["port"] == port:
            out.append(
                problem(
                    host,
                    "sglang_router_port",
                    port,
                    f"instance {instance['name']} uses it too",
                    "give the router a port no instance uses",
                )
            )
    return out + metrics_port_problems(host, values, port, instances)


def metrics_port_problems(host: str, values: Mapping[str, Any], port: int,
                          instances: list) -> list[str]:
    """The router's Prometheus endpoint: a port of its own on the router's address."""
    var = "sglang_router_prometheus_port"
    try:
        metrics = int(values.get(var, 29000))
    except (TypeError, ValueError):
        return []  # the type check reports it
    if not 1 <= metrics <= 65535:
        return [problem(host, var, metrics, "outside 1-65535", "pick a free port such as 29000")]
    users = ["the router itself"] if metrics == port else []
    users += [f"instance {i['name']}" for i in instances if i["port"] == metrics]
    return [problem(host, var, metrics, f"{user} uses it too",
                    "give the router's Prometheus endpoint a port of its own")
            for user in users]
