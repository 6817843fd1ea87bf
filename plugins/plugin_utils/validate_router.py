"""The router's inputs: arguments systemd would alter, its bind address without a key, its port.

Part of the validation pass (action ``sglang_lxc_validate``), and the role sglang_router's own
check before any change (``role_problems``, filter sglang_router_problems): one set of rules.
Unit-tested in tests/unit/validate.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.prometheus_targets import (
    is_loopback,
)
from ansible_collections.sglang_lxc.serving.plugins.plugin_utils.validate_common import (
    problem,
    truthy,
)

SYSTEMD_UNSAFE = re.compile(r"[$%;'\"`\\\n\r]")


def router_problems(host: str, values: Mapping[str, Any], instances: list) -> list[str]:
    """A host's router inputs, where it runs a router (``instances``: the host's, resolved)."""
    if not truthy(values.get("sglang_router_enabled", False)):
        return []
    return input_problems(host, values, instances)


def input_problems(host: str, values: Mapping[str, Any], instances: list) -> list[str]:
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
    for arg in values.get("sglang_router_extra_args") or []:
        if re.match(r"--api-key(=|$)", str(arg)):
            out.append(problem(
                host, "sglang_router_extra_args", "--api-key",  # not the key itself
                "carries --api-key: sglang-router takes a key only on its command line, readable "
                "by any process in /proc/<pid>/cmdline",
                "leave it out (its health checks need no key)",
            ))
    for var in ("sglang_router_host", "sglang_router_policy"):
        if SYSTEMD_UNSAFE.search(str(values.get(var, ""))) or " " in str(values.get(var, "")):
            out.append(problem(host, var, values.get(var), "is not a plain word",
                               "use a plain value (an address, a policy name)"))
    rhost = values.get("sglang_router_host", "127.0.0.1")
    if not is_loopback(str(rhost)) and not truthy(
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
    return (out + metrics_port_problems(host, values, port, instances)
            + health_problems(host, values))


# sglang-router's health-check, circuit-breaker and retry settings (role sglang_router): each a
# whole number of at least 1 (a 0 interval stops the router: tokio's interval panics on it)
HEALTH_SETTINGS = (
    "sglang_router_health_check_interval_secs", "sglang_router_health_check_timeout_secs",
    "sglang_router_health_failure_threshold", "sglang_router_health_success_threshold",
    "sglang_router_cb_failure_threshold", "sglang_router_cb_success_threshold",
    "sglang_router_cb_timeout_duration_secs", "sglang_router_cb_window_duration_secs",
    "sglang_router_retry_max_retries", "sglang_router_worker_startup_check_interval",
)


def health_problems(host: str, values: Mapping[str, Any]) -> list[str]:
    """Each health, breaker and retry setting given is a whole number of at least 1."""
    out = []
    for var in HEALTH_SETTINGS:
        if var not in values:
            continue
        value = values[var]
        try:
            whole = (int(value) if not isinstance(value, bool) and float(value) == int(value)
                     else None)
        except (TypeError, ValueError):
            whole = None
        if whole is None or whole < 1:
            out.append(problem(host, var, value, "is not a whole number of at least 1",
                               "give a count or seconds of 1 or more (README of sglang_router)"))
    endpoint = str(values.get("sglang_router_health_check_endpoint", "/health"))
    if not endpoint.startswith("/") or SYSTEMD_UNSAFE.search(endpoint) or " " in endpoint:
        out.append(problem(host, "sglang_router_health_check_endpoint", endpoint,
                           "is not a plain path", "use a path such as /health"))
    return out


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


def role_problems(variables: Mapping[str, Any], host: str) -> list[str]:
    """The role's check before any change: the same rules, with the workers' URLs
    (``sglang_router_workers``) for the instances (``variables`` may be Ansible's lazy ``vars``)."""
    return input_problems(host, variables,
                          worker_ports(variables.get("sglang_router_workers") or []))


def worker_ports(urls: Sequence[str]) -> list[dict[str, Any]]:
    """Workers as the port checks take instances: named by their URL, with their port."""
    out = []
    for url in urls:
        try:
            port = urlsplit(str(url)).port
        except ValueError:
            port = None
        if port is not None:
            out.append({"name": str(url), "port": port})
    return out
