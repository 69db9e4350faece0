"""The example kernel through pytest-attn's prefill benchmarks and its fuzzer, beside the others.

    pytest examples/triton_attention --attn-backends=triton-example,sdpa-math        # CPU: the fallback
    pytest examples/triton_attention --attn-backends=triton-example,flash-attn,sdpa-cudnn --attn-fuzz
"""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from pytest_attn.plugin import attn_cases, fuzz_targets


def pytest_generate_tests(metafunc):
    if "case" in metafunc.fixturenames:
        cases = attn_cases(metafunc.config, "prefill")
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])
    if "fuzz_target" in metafunc.fixturenames:
        targets = [t for t in fuzz_targets(metafunc.config) if t[0] == "triton-example"]
        metafunc.parametrize("fuzz_target", targets, ids=[f"{b}-{d.replace('+', '')}" for b, d in targets])


def test_prefill(attn_bench, case):
    attn_bench(case)


@given(data=st.data())
def test_fuzz(attn_fuzzer, fuzz_target, data):
    attn_fuzzer.check(*fuzz_target, data)
