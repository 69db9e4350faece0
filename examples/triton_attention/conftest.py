"""Registers the example kernel with pytest-attn: this hook is all a user's conftest needs."""

from __future__ import annotations

from attention import TritonExampleBackend


def pytest_attn_register_backends(registry, config):
    registry.register(TritonExampleBackend())
