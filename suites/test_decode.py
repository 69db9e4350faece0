"""Decode: one new query (or a few, for speculative decoding) against KV caches of 64 ... 32,768
keys, batch 1 ... 64, with the head layouts of real models (Qwen2.5-7B 28/4, Llama-3 32/8 and 64/8).

Back ends: flash-attn with a KV cache (split-KV heuristic, and ``num_splits=1``; dense and paged),
FlashInfer paged decode (pages of 16 and 256) and paged prefill (several queries), PyTorch SDPA,
varlen and flex. These calls take microseconds: the engine captures them in a CUDA graph and reports
the kernels' own time (``kernel-sum``), not launch overhead; decode is memory-bound, so read TB/s.
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
