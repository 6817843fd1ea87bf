# Copyright: sglang-lxc contributors
# Apache-2.0
"""Prometheus ``file_sd`` targets of what a host serves: its SGLang instances and its router.

One entry per target, as Prometheus' ``file_sd_configs`` reads them::

    {"targets": ["10.0.3.200:30000"],
     "labels": {"job": "sglang", "host": "ct200", "sglang_instance": "gpu0",
                "served_model": "llama", "unit": "sglang@gpu0.service", "scope": "network"}}

Where a Prometheus reaches a target: a service bound to one address (127.0.0.1, ::1, a LAN
address) is listed at that address; one bound to every address (0.0.0.0, ::) at the host's
``ansible_host`` (else its inventory name). Loopback targets are listed too, with
``scope: loopback``: only a Prometheus or an agent on that host (inside the container) reaches
them. Instances without ``--enable-metrics`` export no ``/metrics`` and are left out.

Controller side, plain Python: the filters in plugins/filter/prometheus_targets.py wrap it, the
run's ``todo`` callback gathers what the roles publish (set_stats ``prometheus_targets``) into
``prometheus_targets.json`` (docs/runner.md).
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Mapping, Sequence
from typing import Any

JOB_SERVE = "sglang"
JOB_ROUTER = "sglang-router"
ROUTER_UNIT = "sglang-router.service"
LABEL_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
SCOPE_LOOPBACK = "loopback"
SCOPE_NETWORK = "network"
_ANY = ("", "0.0.0.0", "::", "*")  # every address of the host
METRICS_FLAG = "--enable-metrics"


class TargetError(ValueError):
    """Input that gives no target address (a port out of range, no host name)."""


def _unbracket(host: str) -> str:
    host = host.strip()
    if host.startswith("[") and host.endswith("]"):
        return host[1:-1]
    return host


def is_loopback(host: str) -> bool:
    """True when ``host`` only accepts connections from the machine itself."""
    host = _unbracket(host)
    if host.lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def _port(port: Any) -> int:
    if isinstance(port, bool):
        raise TargetError(f"port must be an integer, got {port!r}")
    try:
        value = int(str(port).strip())
    except ValueError:
        raise TargetError(f"port must be an integer, got {port!r}") from None
    if not 1 <= value <= 65535:
        raise TargetError(f"port {value} outside 1-65535")
    return value


def target_address(
    bind: Any, port: Any, inventory_hostname: str, ansible_host: Any = None
) -> tuple[str, str]:
    """(``host:port`` a Prometheus scrapes, scope) for a service bound to ``bind``:``port``.

    ``localhost`` is listed as 127.0.0.1 (what the services here bind for it); 0.0.0.0 and ``::``
    at ``ansible_host`` (else ``inventory_hostname``). The scope is ``loopback`` when the listed
    address is a loopback one, ``network`` otherwise. IPv6 addresses are bracketed.
    """
    number = _port(port)
    host = _unbracket(str(bind if bind is not None else ""))
    if host in _ANY:
        host = _unbracket(str(ansible_host or "")) or str(inventory_hostname or "")
    elif host.lower() == "localhost":
        host = "127.0.0.1"
    if not host:
        raise TargetError("no address: the service binds every address and the host has no "
                          "ansible_host nor inventory name")
    scope = SCOPE_LOOPBACK if is_loopback(host) else SCOPE_NETWORK
    if ":" in host:  # an IPv6 address
        host = f"[{host}]"
    return f"{host}:{number}", scope


def _entry(address: str, labels: Mapping[str, Any]) -> dict[str, Any]:
    clean = {}
    for name, value in labels.items():
        if not LABEL_NAME.match(name) or name.startswith("__"):
            raise TargetError(f"{name!r} is not a Prometheus label name")
        if value is None or value == "":
            continue  # Prometheus drops empty labels: leave them out
        clean[name] = str(value)
    return {"targets": [address], "labels": clean}


def metrics_enabled(instance: Mapping[str, Any]) -> bool:
    """Whether an instance exports ``/metrics``: its ``enable_metrics`` when the instance says,
    else whether its arguments (``argv``, extra arguments included) carry --enable-metrics."""
    if "enable_metrics" in instance and instance["enable_metrics"] is not None:
        value = instance["enable_metrics"]
        if isinstance(value, str):
            return value.strip().lower() in ("1", "true", "yes", "on")
        return bool(value)
    return METRICS_FLAG in [str(arg) for arg in instance.get("argv") or ()]


def serve_targets(
    instances: Sequence[Mapping[str, Any]] | None,
    inventory_hostname: str,
    ansible_host: Any = None,
) -> list[dict[str, Any]]:
    """One entry per resolved sglang_serve instance that exports /metrics (on its own port).

    ``instances``: ``__sglang_serve_instances`` (plugins/plugin_utils/serve_instances.py):
    ``name``, ``unit``, ``port``, ``host`` (the bind address; ``probe_host`` when it is missing),
    ``served_model_name``, and ``enable_metrics`` or ``argv``.
    """
    entries = []
    for instance in instances or ():
        if not metrics_enabled(instance):
            continue
        name = str(instance.get("name") or "")
        bind = instance.get("host", instance.get("probe_host"))
        address, scope = target_address(bind, instance.get("port"), inventory_hostname,
                                        ansible_host)
        entries.append(_entry(address, {
            "job": JOB_SERVE,
            "host": inventory_hostname,
            "sglang_instance": name,
            "served_model": instance.get("served_model_name"),
            "unit": instance.get("unit") or (f"sglang@{name}.service" if name else ""),
            "scope": scope,
        }))
    return sort_entries(entries)


def router_targets(
    bind: Any,
    prometheus_port: Any,
    inventory_hostname: str,
    ansible_host: Any = None,
    unit: str = ROUTER_UNIT,
) -> list[dict[str, Any]]:
    """The router's Prometheus endpoint (``--prometheus-host`` = its bind address,
    ``--prometheus-port``), one entry."""
    address, scope = target_address(bind, prometheus_port, inventory_hostname, ansible_host)
    return [_entry(address, {
        "job": JOB_ROUTER,
        "host": inventory_hostname,
        "unit": unit,
        "scope": scope,
    })]


def entry_key(entry: Mapping[str, Any]) -> tuple[str, ...]:
    """The order of the file: host, job, instance, then address."""
    labels = entry.get("labels") or {}
    targets = entry.get("targets") or [""]
    return (str(labels.get("host", "")), str(labels.get("job", "")),
            str(labels.get("sglang_instance", "")), str(targets[0]))


def sort_entries(entries: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    return [dict(e) for e in sorted(entries, key=entry_key)]
