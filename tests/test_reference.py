"""The sampled-row check catches wrong kernels (CPU)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_attn.case import AttnCase, Mask  # noqa: E402
from pytest_attn.inputs import make_inputs  # noqa: E402
from pytest_attn.reference import check_rows, reference_attention  # noqa: E402


def case(sq, sk, mask=Mask.causal(), dtype="bf16", hq=4, hkv=2):
    return AttnCase.dense(backend="t", shape="s", batch=2, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hkv,
                          head_dim=32, dtype=dtype, mask=mask)


def sdpa_bhsd(inputs, c, attn_mask=None, is_causal=False):
    import torch.nn.functional as F

    return F.scaled_dot_product_attention(inputs.q, inputs.k, inputs.v, attn_mask=attn_mask, is_causal=is_causal,
                                          enable_gqa=True)


def test_correct_output_passes():
    c = case(40, 64)
    inputs = make_inputs(c, "thd", "cpu", seed=3)
    check = check_rows(c, inputs, reference_attention(inputs, c), "thd")
    assert check.ok and check.rows_checked > 4
    assert check.max_error <= check.allowed


def test_top_left_causal_is_caught():
    c = case(40, 64)  # sq != sk: top-left and bottom-right differ
    inputs = make_inputs(c, "bhsd", "cpu", seed=3)
    wrong = sdpa_bhsd(inputs, c, is_causal=True)  # SDPA's is_causal is top-left
    check = check_rows(c, inputs, wrong, "bhsd")
    assert not check.ok
    assert "t-s-bf16-causal-fwd gives wrong output before timing" in check.message(c)


def test_wrong_gqa_mapping_is_caught():
    c = case(32, 32, Mask.none(), hq=4, hkv=2)
    inputs = make_inputs(c, "thd", "cpu", seed=5)
    swapped = make_inputs(c, "thd", "cpu", seed=5)
    swapped.k = swapped.k.flip(1)  # q head 0 now reads kv head 1
    swapped.v = swapped.v.flip(1)
    assert not check_rows(c, inputs, reference_attention(swapped, c), "thd").ok


def test_nan_never_passes():
    c = case(16, 16, Mask.none(), dtype="fp32")
    inputs = make_inputs(c, "thd", "cpu", seed=1)
    out = reference_attention(inputs, c)
    out[3, 1, 2] = float("nan")
    check = check_rows(c, inputs, out, "thd", rows_per_sequence=16)
    assert not check.ok and "NaN/Inf" in check.worst


def test_rows_that_see_nothing_are_left_out_and_reference_gives_zero():
    c = case(10, 4)  # bottom-right causal with sq > sk: rows 0..5 see no key
    inputs = make_inputs(c, "thd", "cpu", seed=2)
    out = reference_attention(inputs, c)
    assert torch.all(out[:6] == 0)
    assert check_rows(c, inputs, out, "thd").ok


def test_fp32_allows_a_fused_kernels_rounding_but_not_a_bug():
    c = case(48, 80, dtype="fp32", hq=4, hkv=4)
    inputs = make_inputs(c, "thd", "cpu", seed=4)
    out = reference_attention(inputs, c)
    assert check_rows(c, inputs, out + 6e-7, "thd").ok  # a few ulp: a fused kernel's summation order
    assert not check_rows(c, inputs, out + 1e-3, "thd").ok
