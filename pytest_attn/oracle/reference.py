"""The upcast reference: what attention is, computed plainly in a wider dtype.

Explicit ``softmax(q k^T * scale + mask) v`` per sequence, GQA by repeating kv heads,
computed in a wider dtype. Fully masked rows (bottom-right causal with ``seqlen_q > seqlen_k``)
give 0, as flash-attn writes. The case's forms (:data:`pytest_attn.core.case.FORMS`): a sink logit per
query head is one more softmax column whose value is 0; a latent KV case takes its values from the key's
first ``head_dim_v`` columns; an fp8 KV cache is dequantised (``k.to(dtype) * k_scale``) in the dtype
the math runs in -- exact in fp64, so the quantisation is the input's, never the kernel's error.

The error rule that compares a back end with it lives in :mod:`pytest_attn.oracle.checks`;
:func:`error_floor` and :func:`output_rounding_term` here are its two exact ingredients.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.case import AttnCase
from ..core.layouts import Inputs, sequence, torch_dtype
from ..core.mask_tensors import dense_mask

if TYPE_CHECKING:
    import torch

FWD_RATIO = 2.0  # outputs: at most 2 x the same math's error in the case's dtype
BWD_RATIO = 3.0  # gradients: 3 x
FP32_FLOOR = 1e-5
#: Gradients of fp32 cases: a gradient that is exactly 0 in exact arithmetic (one visible key, or a
#: GQA sum of cancelling terms) comes out as rounding noise of the size of its terms (~8 x eps x
#: |q| x heads): 1e-5 was seen on the CPU flash kernel where fp32 math happened to give exactly 0.
FP32_GRAD_FLOOR = 1e-4


def error_floor(dtype: str, *, grad: bool = False) -> float:
    """The absolute part of the check's allowance for a dtype (outputs, or gradients)."""
    import torch

    if dtype == "fp32" and grad:
        return FP32_GRAD_FLOOR
    if dtype == "fp32":
        return FP32_FLOOR
    if dtype == "fp8":
        return 0.125
    return float(torch.finfo(torch_dtype(dtype)).eps)


@dataclass(frozen=True)
class Extras:
    """What a case's inputs add to q, k and v (:class:`~pytest_attn.core.layouts.Inputs`): the sink logits
    (``(heads_q,)``, fp32) and the per-tensor scales of an fp8 KV cache."""

    sinks: torch.Tensor | None = None
    k_scale: float = 1.0
    v_scale: float = 1.0

    @classmethod
    def of(cls, inputs: Inputs) -> Extras:
        return cls(inputs.sinks, inputs.k_scale, inputs.v_scale)


PLAIN = Extras()


def _dequantised(t: torch.Tensor, scale: float, dtype: torch.dtype) -> torch.Tensor:
    """``t`` in ``dtype``, times its per-tensor scale (an fp8 KV cache's; 1 otherwise, and then untouched)."""
    out = t.to(dtype)
    return out if scale == 1.0 else out * scale


def attention_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    case: AttnCase,
    rows: torch.Tensor | None,
    compute_dtype: torch.dtype,
    extras: Extras = PLAIN,
) -> torch.Tensor:
    """Attention of one sequence (``q (sq, hq, d)``, ``k, v (sk, hk, d)``) for the query ``rows``
    (all when None), computed in ``compute_dtype``; returns ``(rows, hq, dv)`` in ``compute_dtype``.
    A latent KV case reads its values from ``k`` (``v`` is not used)."""
    import torch

    group = case.heads_q // case.heads_kv
    kc = _dequantised(k, extras.k_scale, compute_dtype)
    vc = kc[..., : case.head_dim_v] if case.latent_kv else _dequantised(v, extras.v_scale, compute_dtype)
    vc = vc.repeat_interleave(group, dim=1)
    return torch.einsum("hqk,khd->qhd", probabilities(q, kc, case, rows, compute_dtype, extras.sinks), vc)


def probabilities(q: torch.Tensor, k: torch.Tensor, case: AttnCase, rows: torch.Tensor | None,
                  compute_dtype: torch.dtype, sinks: torch.Tensor | None = None) -> torch.Tensor:
    """``softmax(q k^T * scale + mask)`` of one sequence, ``(hq, rows, sk)``; rows that see no key are 0.
    With ``sinks`` (one logit per query head) each row's denominator also has ``exp(sink_h)``."""
    import torch

    sq, sk = q.shape[0], k.shape[0]
    group = case.heads_q // case.heads_kv
    qc = q.to(compute_dtype)
    kc = k.to(compute_dtype).repeat_interleave(group, dim=1)
    if rows is not None:
        qc = qc[rows]
    scores = torch.einsum("qhd,khd->hqk", qc, kc) * case.scale
    empty = None
    if case.mask.kind != "none":
        visible = dense_mask(case.mask, sq, sk, q.device, rows)
        empty = ~visible.any(dim=-1, keepdim=True)  # rows with no visible key give 0 (as flash-attn)
        scores = scores.masked_fill(~visible, float("-inf")).masked_fill(empty, 0.0)
    if sinks is None:
        probs = torch.softmax(scores, dim=-1)
    else:  # the sink is one more column of the softmax, whose value is 0
        column = sinks.to(device=scores.device, dtype=compute_dtype)[:, None, None].expand(*scores.shape[:2], 1)
        probs = torch.softmax(torch.cat([scores, column], dim=-1), dim=-1)[..., :-1]
    return probs if empty is None else probs.masked_fill(empty, 0.0)  # finite gradients everywhere


def reference_attention(inputs: Inputs, case: AttnCase, compute_dtype: torch.dtype | None = None) -> torch.Tensor:
    """Whole-case reference in ``thd`` layout (packed tokens), returned in the case's dtype.
    Query rows are processed in blocks so memory stays bounded for long sequences."""
    import torch

    compute = compute_dtype or torch.float32
    outs = []
    for i in range(case.batch):
        q = sequence(inputs.q, inputs.layout, case, i, "q")
        k = sequence(inputs.k, inputs.layout, case, i, "k")
        v = sequence(inputs.v, inputs.layout, case, i, "k")
        sq, sk = q.shape[0], k.shape[0]
        block = max(1, (1 << 26) // max(1, case.heads_q * sk))  # ~256 MB of fp32 scores a block
        parts = []
        for start in range(0, sq, block):
            rows = torch.arange(start, min(sq, start + block), device=q.device)
            parts.append(attention_rows(q, k, v, case, rows, compute, Extras.of(inputs)))
        outs.append(torch.cat(parts))
    return torch.cat(outs).to(torch_dtype(case.dtype))


def attention_and_grads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, case: AttnCase, dtype: torch.dtype,
                        grad_out: torch.Tensor | None, extras: Extras = PLAIN) -> tuple[torch.Tensor, ...]:
    """Output of one sequence in ``dtype`` and, with ``grad_out``, its dq, dk, dv."""
    import torch

    # an fp8 KV cache goes in as it is: attention_rows dequantises it in ``dtype``
    lq, lk, lv = (t.detach() if t.dtype == torch.float8_e4m3fn else t.detach().to(dtype).requires_grad_(
        grad_out is not None) for t in (q, k, v))
    with torch.enable_grad():
        out = attention_rows(lq, lk, lv, case, None, dtype, extras)
        if grad_out is None:
            return (out.detach(),)
        dq, dk, dv = torch.autograd.grad(out, (lq, lk, lv), grad_out.to(dtype))
    return out.detach(), dq, dk, dv


def output_rounding_term(q: torch.Tensor, k: torch.Tensor, case: AttnCase, out: torch.Tensor,
                         ref_out: torch.Tensor, grad_out: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """What a FlashAttention-style backward gets wrong *by design*, in fp64: ``(delta_dq, delta_dk)``.

    Such a backward never keeps the probabilities; it computes ``D_i = sum_c dO_ic O_ic`` from the
    output it returned -- rounded to the case's dtype -- where exact math has ``sum_j P_ij dP_ij``.
    With ``delta_i = sum_c dO_ic (O_ic - O_exact_ic)``, ``dS_ij`` moves by ``-P_ij delta_i``, so
    ``dq_i`` by ``-scale delta_i (P K)_i`` and ``dk_j`` by ``-scale sum_i delta_i P_ij q_i``. Negligible
    for spread-out attention; for peaked attention (a large softmax scale) the true ``dS`` is tiny and
    this term dominates: on an H200, cuDNN, SDPA's efficient and flash kernels and flash-attn 2.8.3 all
    erred alike (the same dq error on 16 of 25 small cases at scale 2, within 3.6 % on the rest), 4-11x
    the error of bf16/fp16 math.
    """
    import torch

    f64 = torch.float64
    q, k = q.detach(), k.detach()
    group = case.heads_q // case.heads_kv
    probs = probabilities(q, k, case, None, f64)  # (hq, sq, sk)
    delta = torch.einsum("qhd,qhd->qh", grad_out.to(f64), out.to(f64) - ref_out.to(f64))  # (sq, hq)
    kc = k.to(f64).repeat_interleave(group, dim=1)
    delta_dq = -case.scale * delta[..., None] * torch.einsum("hqk,khd->qhd", probs, kc)
    delta_dk = -case.scale * torch.einsum("hqk,qh,qhd->khd", probs, delta, q.to(f64))  # per q head
    delta_dk = delta_dk.reshape(delta_dk.shape[0], case.heads_kv, group, -1).sum(dim=2)
    return delta_dq, delta_dk


