"""Gradients on sampled rows (pytest_attn.oracle.grad_rows) equal full autograd, and the pre-timing
gradient check (pytest_attn.oracle.grad_check.check_grad_rows) catches planted faults."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from pytest_attn.core import masks  # noqa: E402
from pytest_attn.core.case import AttnCase, Mask  # noqa: E402
from pytest_attn.engine.inputs import make_inputs  # noqa: E402
from pytest_attn.oracle.checks import check_finite, check_rows  # noqa: E402
from pytest_attn.oracle.grad_check import check_grad_rows  # noqa: E402
from pytest_attn.oracle.grad_rows import grads_at, rounding_term, row_stats  # noqa: E402
from pytest_attn.oracle.reference import attention_and_grads, output_rounding_term, reference_attention  # noqa: E402

MASKS = [Mask.none(), Mask.causal(), Mask.window(3, 2), masks.prefix_lm(2), masks.random_block_sparse(4, 0.5)]


def one(mask, sq=7, sk=11, hq=4, hkv=2, d=8, scale=None):
    return AttnCase("ref", "s", (sq,), (sk,), hq, hkv, d, d, "fp32", mask, "fwd+bwd", softmax_scale=scale)


@pytest.mark.parametrize("mask", MASKS, ids=lambda m: m.id)
@pytest.mark.parametrize(("sq", "sk"), [(7, 11), (11, 7), (9, 9)])
def test_sampled_gradients_equal_full_autograd(mask, sq, sk):
    case = one(mask, sq, sk, scale=0.7)
    gen = torch.Generator().manual_seed(0)
    q, k, v, do = (torch.randn(n, h, 8, generator=gen, dtype=torch.float64)
                   for n, h in ((sq, 4), (sk, 2), (sk, 2), (sq, 4)))
    out, dq, dk, dv = attention_and_grads(q, k, v, case, torch.float64, do)
    rows, cols = torch.tensor([0, sq // 2, sq - 1]), torch.tensor([0, 2, sk - 1])
    stats = row_stats(q, k, v, case)
    assert torch.allclose(stats.out, out, atol=1e-12)
    got_dq, got_dk, got_dv = grads_at(q, k, v, do, case, rows, cols, stats)
    assert torch.allclose(got_dq, dq[rows], atol=1e-12)
    assert torch.allclose(got_dk, dk[cols], atol=1e-12) and torch.allclose(got_dv, dv[cols], atol=1e-12)
    rounded = out.to(torch.float16).to(torch.float64)
    full_dq, full_dk = output_rounding_term(q, k, case, rounded, out, do)
    term_dq, term_dk = rounding_term(q, k, rounded, do, case, rows, cols, stats)
    assert torch.allclose(term_dq, full_dq[rows], atol=1e-12) and torch.allclose(term_dk, full_dk[cols], atol=1e-12)


def _grads(case, inputs):
    out = reference_attention(inputs, case, torch.float64).detach()
    q, k, v = (t.detach().requires_grad_(True) for t in (inputs.q, inputs.k, inputs.v))
    ins = dataclasses.replace(inputs, q=q, k=k, v=v)
    res = reference_attention(ins, case, torch.float64)
    dq, dk, dv = torch.autograd.grad(res, (q, k, v), inputs.grad_out)
    return out, (dq, dk, dv)


def ragged(dtype="bf16"):
    return AttnCase("ref", "r", (5, 1, 17, 9), (5, 3, 17, 12), 4, 2, 16, 16, dtype, Mask.causal(), "fwd+bwd")


def test_correct_gradients_of_every_sequence_pass():
    case = ragged()
    inputs = make_inputs(case, "thd", "cpu", requires_grad=True, seed=1)
    out, grads = _grads(case, inputs)
    check = check_grad_rows(case, inputs, out, "thd", grads)
    assert check.ok, check.message(case)
    assert check.rows_checked >= 4 * 2  # every sequence: sampled query rows and key rows


@pytest.mark.parametrize("tensor", ["dq", "dk", "dv"])
def test_a_wrong_gradient_in_a_middle_sequence_fails(tensor):
    case = ragged()
    inputs = make_inputs(case, "thd", "cpu", requires_grad=True, seed=1)
    out, (dq, dk, dv) = _grads(case, inputs)
    planted = {"dq": dq.clone(), "dk": dk.clone(), "dv": dv.clone()}
    start = 5 + 1 if tensor == "dq" else 5 + 3  # the third sequence
    planted[tensor][start:start + 17] *= 1.5  # a backward that scales one sequence's gradient
    check = check_grad_rows(case, inputs, out, "thd", (planted["dq"], planted["dk"], planted["dv"]))
    assert not check.ok and check.tensor == tensor and "sequence 2" in check.worst
    assert f"gives a wrong gradient {tensor} before timing" in check.message(case)


def test_nan_anywhere_in_outputs_or_gradients_is_found_in_one_pass():
    case = ragged()
    inputs = make_inputs(case, "thd", "cpu", requires_grad=True, seed=1)
    out, (dq, dk, dv) = _grads(case, inputs)
    assert check_finite({"out": out, "dq": dq, "dk": dk, "dv": dv}) is None
    dv = dv.clone()
    dv[20, 1, 3] = float("nan")  # a key row no sampled check would pick
    problem = check_finite({"out": out, "dq": dq, "dk": dk, "dv": dv})
    assert problem is not None and problem.tensor == "dv" and problem.worst.startswith("index [20, 1, 3] of dv")
    assert "nan (the whole tensor was checked: 1 element(s) not finite)" in problem.message(case)


def test_the_output_check_covers_a_middle_sequence_of_a_ragged_batch():
    case = dataclasses.replace(ragged("fp32"), direction="fwd")
    inputs = make_inputs(case, "thd", "cpu", seed=2)
    out = reference_attention(inputs, case)
    assert check_rows(case, inputs, out, "thd").ok
    wrong = out.clone()
    wrong[5 + 1 : 5 + 1 + 17] = wrong[5 + 1 : 5 + 1 + 17].flip(0)  # only the third sequence is wrong
    check = check_rows(case, inputs, wrong, "thd")
    assert not check.ok and "sequence 2" in check.worst


def test_long_sequences_check_whole_gqa_groups_of_a_few_heads():
    from pytest_attn.oracle.grad_check import GRAD_CHECK_FLOPS, grad_check_heads

    case = AttnCase("ref", "h", (111_856,), (111_856,), 24, 24, 128, 128, "bf16", Mask.none(), "fwd+bwd")
    heads = grad_check_heads(case, 0)
    assert heads is not None and len(heads.kv) == 1 and heads.q == heads.kv  # 6.4 TFLOP a head: one head
    gqa = AttnCase("ref", "g", (16_384,), (16_384,), 32, 8, 128, 128, "bf16", Mask.causal(), "fwd+bwd")
    heads = grad_check_heads(gqa, 0)
    assert heads is not None and len(heads.kv) * 4 == len(heads.q)  # every query head of each kv head's group
    per_group = 4 * 16_384**2 * 4 * 128  # FLOPs of one pass over one GQA group's 4 query heads
    assert all(h // 4 in heads.kv for h in heads.q) and per_group * len(heads.kv) <= GRAD_CHECK_FLOPS < per_group * 8
    llama = AttnCase("ref", "l", (8192,), (8192,), 32, 8, 128, 128, "bf16", Mask.causal(), "fwd+bwd")
    assert grad_check_heads(llama, 0) is None  # 1.1 TFLOP: every head


@pytest.mark.parametrize("tensor", ["dq", "dk", "dv"])
def test_a_wrong_head_among_the_sampled_ones_is_found_and_named(monkeypatch, tensor):
    import pytest_attn.oracle.grad_check as checks

    case = AttnCase("ref", "r", (5, 17), (5, 17), 8, 4, 16, 16, "bf16", Mask.causal(), "fwd+bwd")
    inputs = make_inputs(case, "thd", "cpu", requires_grad=True, seed=1)
    out, (dq, dk, dv) = _grads(case, inputs)
    monkeypatch.setattr(checks, "GRAD_CHECK_FLOPS", 4 * 17 * 17 * 2 * 16 * 2)  # two kv heads of four fit
    heads = checks.grad_check_heads(case, 1)
    assert heads is not None and heads.kv == [0, 2] and heads.q == [0, 1, 4, 5]
    full = check_grad_rows(case, inputs, out, "thd", (dq, dk, dv))
    assert full.ok and full.kv_heads_checked == 2, full.message(case)
    planted = {"dq": dq.clone(), "dk": dk.clone(), "dv": dv.clone()}
    head = 5 if tensor == "dq" else 2  # a covered head of the second sequence
    planted[tensor][5:, head] *= 1.5
    check = check_grad_rows(case, inputs, out, "thd", (planted["dq"], planted["dk"], planted["dv"]))
    assert not check.ok and check.tensor == tensor and f"head {head}," in check.worst and "sequence 1" in check.worst
