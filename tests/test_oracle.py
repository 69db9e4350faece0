"""The oracle: the fp64 reference (pytest_attn.oracle.reference) and the error rule that catches wrong
kernels, on sampled rows and on every element and gradient (pytest_attn.oracle.checks). CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_attn.core.case import AttnCase, Mask  # noqa: E402
from pytest_attn.engine.inputs import make_inputs  # noqa: E402
from pytest_attn.oracle import checks  # noqa: E402
from pytest_attn.oracle.checks import check_full, check_rows  # noqa: E402
from pytest_attn.oracle.reference import output_rounding_term, probabilities, reference_attention  # noqa: E402


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
    assert "t-s-bf16-causal-fwd gives a wrong output before timing" in check.message(c)


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
    assert not check.ok and check.problem == "NaN/Inf" and check.worst == "sequence 0, row 3, head 1, column 2"


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


def _flash_style_backward(c, inputs, dtype):
    """A FlashAttention backward emulated in fp64: D from the output rounded to ``dtype``."""
    f64 = torch.float64
    q, k, v, do = (t.detach().to(f64) for t in (inputs.q, inputs.k, inputs.v, inputs.grad_out))
    sk, group = k.shape[0], c.heads_q // c.heads_kv
    probs = probabilities(q, k, c, None, f64)
    kr, vr = k.repeat_interleave(group, 1), v.repeat_interleave(group, 1)
    out = torch.einsum("hqk,khd->qhd", probs, vr).to(dtype)
    d_row = torch.einsum("qhd,qhd->hq", do, out.to(f64))
    ds = probs * (torch.einsum("qhd,khd->hqk", do, vr) - d_row[..., None])
    dq = c.scale * torch.einsum("hqk,khd->qhd", ds, kr)
    dk = c.scale * torch.einsum("hqk,qhd->khd", ds, q).reshape(sk, c.heads_kv, group, -1).sum(2)
    dv = torch.einsum("hqk,qhd->khd", probs, do).reshape(sk, c.heads_kv, group, -1).sum(2)
    return out, dq.to(dtype), dk.to(dtype), dv.to(dtype)


def _peaked_case():
    import dataclasses

    c = AttnCase.dense(backend="t", shape="s", batch=1, seqlen_q=2, seqlen_k=3, heads_q=2, heads_kv=1, head_dim=64,
                       dtype="fp16")
    return dataclasses.replace(c, softmax_scale=2.0, direction="fwd+bwd")


def test_output_rounding_term_is_exactly_what_a_flash_backward_changes():
    c = _peaked_case()
    inputs = make_inputs(c, "thd", "cpu", requires_grad=True, seed=0)
    f64 = torch.float64
    q, k, v, do = (t.detach().to(f64) for t in (inputs.q, inputs.k, inputs.v, inputs.grad_out))
    exact_out = torch.einsum("hqk,khd->qhd", probabilities(q, k, c, None, f64), v.repeat_interleave(2, 1))
    rounded_out = exact_out.to(torch.float16).to(f64)
    delta_dq, delta_dk = output_rounding_term(q, k, c, rounded_out, exact_out, do)

    def flash(out_for_d):  # the same backward, D from the given output, no other rounding
        probs = probabilities(q, k, c, None, f64)
        ds = probs * (torch.einsum("qhd,khd->hqk", do, v.repeat_interleave(2, 1))
                      - torch.einsum("qhd,qhd->hq", do, out_for_d)[..., None])
        return (c.scale * torch.einsum("hqk,khd->qhd", ds, k.repeat_interleave(2, 1)),
                c.scale * torch.einsum("hqk,qhd->khd", ds, q).reshape(3, 1, 2, -1).sum(2))

    (dq_exact, dk_exact), (dq_rounded, dk_rounded) = flash(exact_out), flash(rounded_out)
    assert torch.allclose(dq_rounded - dq_exact, delta_dq, rtol=0, atol=1e-12)
    assert torch.allclose(dk_rounded - dk_exact, delta_dk, rtol=0, atol=1e-12)
    assert delta_dk.abs().max() > 1e-3  # not negligible at this scale


def test_a_flash_backward_passes_by_its_design_term_and_a_wrong_gradient_still_fails(monkeypatch):
    c = _peaked_case()
    inputs = make_inputs(c, "thd", "cpu", requires_grad=True, seed=0)
    out, dq, dk, dv = _flash_style_backward(c, inputs, torch.float16)
    check = check_full(c, inputs, out, "thd", (dq, dk, dv))
    assert check.ok
    wrong = check_full(c, inputs, out, "thd", (dq.flip(1), dk, dv))  # dq of the other query head
    assert not wrong.ok and wrong.tensor == "dq"
    # without the term, the oracle would call this correct flash backward wrong (3.4x fp16 math on dk)
    monkeypatch.setattr(checks, "output_rounding_term", lambda *a: (torch.zeros(0), torch.zeros(0)))
    strict = check_full(c, inputs, out, "thd", (dq, dk, dv))
    assert not strict.ok and strict.tensor == "dk"
