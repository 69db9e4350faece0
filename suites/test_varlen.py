"""Varlen: ragged batches of mixed lengths (1, 7, 128, 300, 1,025 tokens; a skewed serving mix; a
uniform batch packed) through ``flash_attn_varlen_func``, FlashInfer's ragged prefill,
``torch.nn.attention.varlen`` and, as the naive baseline, a loop of one SDPA call per sequence.
"""

from __future__ import annotations

import pytest

from pytest_attn.plugin import attn_cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        cases = attn_cases(metafunc.config, "varlen")
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_varlen(attn_bench, case):
    attn_bench(case)
