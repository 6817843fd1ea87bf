"""Markers of the sglang tests (also to be declared in pyproject.toml)."""

from __future__ import annotations


def pytest_configure(config):
    config.addinivalue_line(
        "markers", "network: reaches the public package index (PyPI); CI runs them"
    )
