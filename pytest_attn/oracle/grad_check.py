"""The gradient check before timing: dq on sampled query rows and dk, dv on sampled key rows of every
sequence of a fwd+bwd case against the fp64 reference of :mod:`.grad_rows`, by the error rule of
:mod:`.checks`; on long sequences, over whole GQA groups of a few kv heads (:func:`grad_check_heads`)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING

from ..core.case import AttnCase
from ..core.layouts import Inputs, sequence, torch_dtype
from .checks import RowCheck, _sample, _sample_rows, _Worst
from .grad_rows import grads_at, rounding_term, row_stats
from .reference import BWD_RATIO, error_floor

if TYPE_CHECKING:
    import torch


def check_grad_rows(case: AttnCase, inputs: Inputs, out: torch.Tensor, out_layout: str,
                    grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor], *, rows_per_sequence: int = 4,
                    seed: int = 0) -> RowCheck:
    """dq on sampled query rows and dk, dv on sampled key rows of every sequence against the fp64
    reference, by the oracle's gradient rule: within 3x the same math's error in the case's dtype, plus
    one unit of the dtype at the gradient's size, plus -- for dq and dk -- what a FlashAttention backward
    errs by design. The reference never holds a whole score matrix (:mod:`.grad_rows`)."""

    assert inputs.grad_out is not None, "a fwd+bwd case's inputs carry dO"
    worst = {n: _Worst(n) for n in ("dq", "dk", "dv")}
    by_design = {"dq": 0.0, "dk": 0.0}
    checked, kv_heads = 0, case.heads_kv  # the fewest kv heads any sequence's check covered
    for index in range(case.batch):
        parts = _grad_parts(case, inputs, out, out_layout, grads, index, rows_per_sequence, seed)
        if parts is None:
            continue
        rows_list, cols_list, ref, low, got, term, heads = parts
        kv_heads = min(kv_heads, len(heads.kv) if heads is not None else case.heads_kv)
        q_labels, kv_labels = (heads.q, heads.kv) if heads is not None else (None, None)
        for name, r, lo, g, labels, kind, head_labels in zip(
                ("dq", "dk", "dv"), ref, low, got, (rows_list, cols_list, cols_list), ("row", "key", "key"),
                (q_labels, kv_labels, kv_labels), strict=True):
            problem = worst[name].add(g, r, lo, index, labels, kind, head_labels)
            if problem is not None:
                return problem
        for name, t in zip(("dq", "dk"), term, strict=True):
            by_design[name] = max(by_design[name], float(t.abs().max()) if t.numel() else 0.0)
        checked += len(rows_list) + len(cols_list)
    unit = error_floor(case.dtype, grad=True)
    result = None
    for name, w in worst.items():
        check = w.verdict(BWD_RATIO * w.lowp + max(unit, unit * w.size) + by_design.get(name, 0.0), checked)
        check = replace(check, kv_heads_checked=kv_heads)
        if not check.ok:
            return check
        result = result or check
    assert result is not None
    return result


#: The gradient check's reference makes one pass over every query row of a sequence (the log-sum-exp
#: that dk and dv at a sampled key need), in fp64 and again in the case's dtype. Above this many FLOPs
#: for that pass (``4 sq sk hq d``) it covers whole GQA groups of a few kv heads instead of every head:
#: on an H200 a HunyuanVideo fwd+bwd case's check over all 24 heads took 43-45 s, about 1.8 s a head.
GRAD_CHECK_FLOPS = 4e12


@dataclass(frozen=True)
class _Heads:
    """The heads a gradient check covers: kv heads and the query heads of their GQA groups."""

    kv: list[int]
    q: list[int]


def grad_check_heads(case: AttnCase, index: int, seed: int = 0) -> _Heads | None:
    """The heads the gradient check of sequence ``index`` covers: every head (None) while one reference
    pass costs at most :data:`GRAD_CHECK_FLOPS`, else as many whole GQA groups as fit in it, at least one:
    the first, last, middle and random kv heads."""
    group = case.heads_q // case.heads_kv
    per_group = 4 * case.seqlens_q[index] * case.seqlens_k[index] * group * max(case.head_dim_qk, case.head_dim_v)
    fit = max(1, int(GRAD_CHECK_FLOPS // max(1, per_group)))
    if fit >= case.heads_kv:
        return None
    kv = _sample(fit, case.heads_kv, lambda h: True, seed + 2000 + index)
    return _Heads(kv, [h * group + g for h in kv for g in range(group)])


def _grad_parts(case: AttnCase, inputs: Inputs, out: torch.Tensor, out_layout: str,
                grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor], index: int, count: int,
                seed: int) -> tuple[list[int], list[int], tuple[torch.Tensor, ...], tuple[torch.Tensor, ...],
                                    tuple[torch.Tensor, ...], tuple[torch.Tensor, ...], _Heads | None] | None:
    """One sequence's sampled rows and keys, the fp64 and low-precision reference gradients there, the
    kernel's, the by-design term, and the heads covered (:func:`grad_check_heads`; None: all)."""
    import torch

    rows_list = _sample_rows(case, index, count, seed + index)
    cols_list = _sample(count, case.seqlens_k[index], lambda j: True, seed + 1000 + index)
    if not rows_list or inputs.grad_out is None:
        return None
    heads = grad_check_heads(case, index, seed)
    q, k, v, g_out = (sequence(t, inputs.layout, case, index, w).detach() for t, w in (
        (inputs.q, "q"), (inputs.k, "k"), (inputs.v, "k"), (inputs.grad_out, "q")))
    q_of, kv_of = _head_picker(heads, q.device)
    q, k, v, g_out = q_of(q), kv_of(k), kv_of(v), q_of(g_out)
    rows, cols = torch.tensor(rows_list, device=q.device), torch.tensor(cols_list, device=q.device)
    f64, low_dtype = torch.float64, torch_dtype(case.dtype) if case.dtype != "fp8" else torch.bfloat16
    q64, k64, v64, do64 = (t.to(f64) for t in (q, k, v, g_out))
    stats = row_stats(q64, k64, v64, case)
    ref = grads_at(q64, k64, v64, do64, case, rows, cols, stats)
    ql, kl, vl, dol = (t.to(low_dtype) for t in (q, k, v, g_out))
    low = grads_at(ql, kl, vl, dol, case, rows, cols, row_stats(ql, kl, vl, case))
    dq, dk, dv = (sequence(g, inputs.layout, case, index, w).detach() for g, w in zip(grads, "qkk", strict=True))
    kernel_out = torch.nan_to_num(q_of(sequence(out, out_layout, case, index, "q").detach()).to(f64))
    term = rounding_term(q64, k64, kernel_out, do64, case, rows, cols, stats)
    return rows_list, cols_list, ref, low, (q_of(dq[rows]), kv_of(dk[cols]), kv_of(dv[cols])), term, heads


def _head_picker(heads: _Heads | None, device: torch.device) -> tuple[Callable[[torch.Tensor], torch.Tensor],
                                                                      Callable[[torch.Tensor], torch.Tensor]]:
    """(keep the covered query heads, keep the covered kv heads) of a ``(tokens, heads, dim)`` tensor."""
    import torch

    if heads is None:
        return (lambda t: t), (lambda t: t)
    q_index, kv_index = torch.tensor(heads.q, device=device), torch.tensor(heads.kv, device=device)
    return (lambda t: t.index_select(1, q_index)), (lambda t: t.index_select(1, kv_index))
