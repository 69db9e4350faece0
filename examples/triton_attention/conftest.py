"""Registers the example kernel with pytest-attn (the hook), and marks the example an attention run."""

from __future__ import annotations

from attention import TritonExampleBackend

from pytest_attn.plugin import prepare_attention_run


def pytest_configure(config):
    prepare_attention_run(config)  # an attention run: the GPU in machine_info, storage and fuzz profile


def pytest_attn_register_backends(registry, config):
    registry.register(TritonExampleBackend())
