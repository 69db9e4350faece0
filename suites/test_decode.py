"""Decode: one new query against a KV cache (Qwen2.5-7B head layout, 64 ... 32,768 cached keys).

Short calls: the engine times them by CUDA-graph replay, so the figure is the kernel's time, not the
host's launch overhead.
"""

from __future__ import annotations

import pytest

from pytest_attn.plugin import attn_cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        cases = attn_cases(metafunc.config, "decode")
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_decode(attn_bench, case):
    attn_bench(case)
