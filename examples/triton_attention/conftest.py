"""Registers the example kernel with pytest-attn (the hook); the plugin itself prepares the run (threads,
autosave, per-GPU history, the fuzz profile) wherever a back end is registered."""

from __future__ import annotations

from attention import TritonExampleBackend


def pytest_attn_register_backends(registry, config):
    registry.register(TritonExampleBackend())
