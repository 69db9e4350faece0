"""Gradients on sampled rows, without the full score matrix: the reference for checking a fwd+bwd case
before it is timed, at any length (a 111,856-token score matrix has 12.5 G entries a head).

One blockwise pass over the query rows gives each row's log-sum-exp and output; from them, for sampled
query rows ``R`` and sampled key rows ``C`` (per head, ``P = exp(S - lse)``, ``dP = dO v^T``,
``D_i = dO_i . O_i``, ``dS = P (dP - D)``)::

    dq_R = scale * dS[R, :] k            (the rows' own scores against every key)
    dv_C = sum_i P[i, C]^T dO_i           (every query row's score against the sampled keys)
    dk_C = scale * sum_i dS[i, C]^T q_i

with the heads of a GQA group summed for dk and dv. The tensors may hold some of the case's heads (whole
GQA groups): the group size is read from their shapes. The same formulas run in fp64 for the truth and in
the case's dtype for the allowance. :func:`rounding_term` is what a FlashAttention backward errs by
design (``D`` from the output it returned, rounded): ``delta_i = dO_i . (O_kernel_i - O_i)`` moves dq_i by
``-scale delta_i (P k)_i`` and dk_j by ``-scale sum_i delta_i P_ij q_i``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..core.case import AttnCase
from ..core.mask_tensors import dense_mask

if TYPE_CHECKING:
    import torch

BLOCK_BYTES = 1 << 28  # scores held at once by the blockwise pass


@dataclass(frozen=True)
class RowStats:
    """Per query row and head: ``lse`` (sq, hq; -inf for a row that sees no key) and ``out`` (sq, hq, dv)."""

    lse: torch.Tensor
    out: torch.Tensor


def _scores(q: torch.Tensor, k: torch.Tensor, case: AttnCase, rows: torch.Tensor, cols: torch.Tensor | None,
            sq: int, sk: int) -> torch.Tensor:
    """Masked scores ``(hq, len(rows), len(cols) or sk)`` of query ``rows`` against key ``cols`` (all when
    None), in q's dtype; masked pairs are -inf."""
    import torch

    group = q.shape[1] // k.shape[1]
    keys = k if cols is None else k[cols]
    s = torch.einsum("qhd,khd->hqk", q[rows], keys.repeat_interleave(group, dim=1)) * case.scale
    if case.mask.kind != "none":
        visible = dense_mask(case.mask, sq, sk, q.device, rows)
        if cols is not None:
            visible = visible[:, cols]
        s = s.masked_fill(~visible, float("-inf"))
    return s


def _probabilities(s: torch.Tensor, lse: torch.Tensor) -> torch.Tensor:
    """``exp(s - lse)`` for scores ``(hq, rows, keys)`` and ``lse`` ``(rows, hq)``; 0 where nothing is seen."""
    import torch

    lse_t = lse.transpose(0, 1)[..., None]
    p = torch.exp(s - torch.where(torch.isfinite(lse_t), lse_t, torch.zeros_like(lse_t)))
    return p.masked_fill(~torch.isfinite(lse_t), 0.0)


def row_stats(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, case: AttnCase) -> RowStats:
    """Log-sum-exp and output of every query row of one sequence, blockwise, in q's dtype."""
    import torch

    sq, sk = q.shape[0], k.shape[0]
    group = q.shape[1] // k.shape[1]
    vr = v.repeat_interleave(group, dim=1)
    block = max(1, BLOCK_BYTES // max(1, q.shape[1] * sk * q.element_size()))
    lses, outs = [], []
    for start in range(0, sq, block):
        rows = torch.arange(start, min(sq, start + block), device=q.device)
        s = _scores(q, k, case, rows, None, sq, sk)
        lse = torch.logsumexp(s, dim=-1).transpose(0, 1)  # (rows, hq)
        outs.append(torch.einsum("hqk,khd->qhd", _probabilities(s, lse), vr))
        lses.append(lse)
    return RowStats(torch.cat(lses), torch.cat(outs))


def grads_at(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, grad_out: torch.Tensor, case: AttnCase,
             rows: torch.Tensor, cols: torch.Tensor, stats: RowStats) -> tuple[torch.Tensor, ...]:
    """(dq at query ``rows``, dk and dv at key ``cols``) of one sequence, in q's dtype (see the module)."""
    import torch

    sq, sk = q.shape[0], k.shape[0]
    group = q.shape[1] // k.shape[1]
    kr, vr = k.repeat_interleave(group, dim=1), v.repeat_interleave(group, dim=1)
    d = torch.einsum("qhd,qhd->qh", grad_out, stats.out)  # D_i per row and head
    # dq at the sampled query rows
    p_r = _probabilities(_scores(q, k, case, rows, None, sq, sk), stats.lse[rows])
    dp_r = torch.einsum("qhd,khd->hqk", grad_out[rows], vr)
    ds_r = p_r * (dp_r - d[rows].transpose(0, 1)[..., None])
    dq = case.scale * torch.einsum("hqk,khd->qhd", ds_r, kr)
    # dk and dv at the sampled key rows, from every query row
    every = torch.arange(sq, device=q.device)
    p_c = _probabilities(_scores(q, k, case, every, cols, sq, sk), stats.lse)  # (hq, sq, C)
    dp_c = torch.einsum("qhd,khd->hqk", grad_out, vr[cols])
    ds_c = p_c * (dp_c - d.transpose(0, 1)[..., None])
    dv = torch.einsum("hqk,qhd->khd", p_c, grad_out)
    dk = case.scale * torch.einsum("hqk,qhd->khd", ds_c, q)
    fold = (len(cols), k.shape[1], group, -1)
    return dq, dk.reshape(fold).sum(dim=2), dv.reshape(fold).sum(dim=2)


def rounding_term(q: torch.Tensor, k: torch.Tensor, kernel_out: torch.Tensor, grad_out: torch.Tensor,
                  case: AttnCase, rows: torch.Tensor, cols: torch.Tensor, stats: RowStats) -> tuple[torch.Tensor, ...]:
    """(dq at ``rows``, dk at ``cols``) moved by ``D`` computed from the kernel's rounded output (fp64)."""
    import torch

    sq, sk = q.shape[0], k.shape[0]
    group = q.shape[1] // k.shape[1]
    delta = torch.einsum("qhd,qhd->qh", grad_out, kernel_out - stats.out)  # (sq, hq)
    p_r = _probabilities(_scores(q, k, case, rows, None, sq, sk), stats.lse[rows])
    delta_dq = -case.scale * delta[rows][..., None] * torch.einsum("hqk,khd->qhd", p_r,
                                                                   k.repeat_interleave(group, dim=1))
    every = torch.arange(sq, device=q.device)
    p_c = _probabilities(_scores(q, k, case, every, cols, sq, sk), stats.lse)
    delta_dk = -case.scale * torch.einsum("hqk,qh,qhd->khd", p_c, delta, q)
    return delta_dq, delta_dk.reshape(len(cols), k.shape[1], group, -1).sum(dim=2)
