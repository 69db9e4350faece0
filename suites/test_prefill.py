"""Prefill attention on real model shapes: catalog shapes x dtypes x back ends x masks x directions.

The profile (--attn-profile) picks the shapes; --attn-backends, --attn-dtypes and --attn-directions
narrow them. Without a CUDA device the CPU profile runs and GPU-only back ends skip.
"""

from __future__ import annotations

import pytest

from pytest_attn.plugin import attn_cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        cases = attn_cases(metafunc.config, "prefill")
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_prefill(attn_bench, case):
    attn_bench(case)
