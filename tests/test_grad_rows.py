"""Gradients on sampled rows (pytest_attn.oracle.grad_rows) equal full autograd, and the pre-timing
gradient check (pytest_attn.oracle.checks.check_grad_rows) catches planted faults."""

from __future__ import annotations

import dataclasses

import pytest

torch = pytest.importorskip("torch")

from pytest_attn.core import masks  # noqa: E402
from pytest_attn.core.case import AttnCase, Mask  # noqa: E402
from pytest_attn.engine.inputs import make_inputs  # noqa: E402
from pytest_attn.oracle.checks import check_finite, check_grad_rows, check_rows  # noqa: E402
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
