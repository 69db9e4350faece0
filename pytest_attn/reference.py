"""The upcast reference, and the sampled-row check every benchmarked call passes before it is timed.

Reference: explicit ``softmax(q k^T * scale + mask) v`` per sequence, GQA by repeating kv heads,
computed in a wider dtype. Fully masked rows (bottom-right causal with ``seqlen_q > seqlen_k``)
give 0, as flash-attn writes.

Check rule (flash-attention's own tests): on sampled query rows, the back end's largest error
against an fp64 reference must be at most ``2 x`` the error of the same math run in the case's
dtype, plus an absolute floor: one unit of the dtype's precision (eps) for 16-bit types, ``1e-5``
for fp32, where a fused kernel's own summation order and fast ``exp`` differ from plain math by a
few units in the last place (seen on an H200: SDPA's efficient kernel at 5.8e-7 where fp32 math
erred by 1.9e-7). A real bug (a wrong mask or head mapping) errs by 0.01 to 1. NaN or Inf never
pass.
Rows that see no key are left out here: each back end's behaviour there is checked by the fuzzer.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .case import AttnCase
from .flops import visible_keys_per_row
from .inputs import Inputs, sequence, torch_dtype
from .masks import dense_mask

if TYPE_CHECKING:
    import torch

FWD_RATIO = 2.0
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


def attention_rows(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    case: AttnCase,
    rows: torch.Tensor | None,
    compute_dtype: torch.dtype,
) -> torch.Tensor:
    """Attention of one sequence (``q (sq, hq, d)``, ``k, v (sk, hk, d)``) for the query ``rows``
    (all when None), computed in ``compute_dtype``; returns ``(rows, hq, dv)`` in ``compute_dtype``."""
    import torch

    group = case.heads_q // case.heads_kv
    vc = v.to(compute_dtype).repeat_interleave(group, dim=1)
    return torch.einsum("hqk,khd->qhd", probabilities(q, k, case, rows, compute_dtype), vc)


def probabilities(q: torch.Tensor, k: torch.Tensor, case: AttnCase, rows: torch.Tensor | None,
                  compute_dtype: torch.dtype) -> torch.Tensor:
    """``softmax(q k^T * scale + mask)`` of one sequence, ``(hq, rows, sk)``; rows that see no key are 0."""
    import torch

    sq, sk = q.shape[0], k.shape[0]
    group = case.heads_q // case.heads_kv
    qc = q.to(compute_dtype)
    kc = k.to(compute_dtype).repeat_interleave(group, dim=1)
    if rows is not None:
        qc = qc[rows]
    scores = torch.einsum("qhd,khd->hqk", qc, kc) * case.scale
    if case.mask.kind == "none":
        return torch.softmax(scores, dim=-1)
    visible = dense_mask(case.mask, sq, sk, q.device, rows)
    empty = ~visible.any(dim=-1, keepdim=True)  # rows with no visible key give 0 (as flash-attn)
    scores = scores.masked_fill(~visible, float("-inf")).masked_fill(empty, 0.0)
    return torch.softmax(scores, dim=-1).masked_fill(empty, 0.0)  # finite gradients everywhere


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
            parts.append(attention_rows(q, k, v, case, rows, compute))
        outs.append(torch.cat(parts))
    return torch.cat(outs).to(torch_dtype(case.dtype))


@dataclass(frozen=True)
class RowCheck:
    ok: bool
    max_error: float
    lowp_error: float
    allowed: float
    rows_checked: int
    worst: str  # "sequence s, row r, head h, column c"

    @property
    def ratio(self) -> float:
        return self.max_error / self.lowp_error if self.lowp_error > 0 else float("inf")

    def message(self, case: AttnCase) -> str:
        return (
            f"{case.id} gives wrong output before timing: max |out - ref| = {self.max_error:.3g} at "
            f"{self.worst}, allowed {self.allowed:.3g} (2 x the {case.dtype} math error {self.lowp_error:.3g} "
            f"+ the {case.dtype} floor). A benchmark of a wrong kernel is not reported; check the back end's mask and "
            f"layout handling for {case.describe()}."
        )


def _sample_rows(case: AttnCase, index: int, count: int, gen_seed: int) -> list[int]:
    """Rows to check: first, last, middle and random ones, leaving out rows that see no key."""
    import random

    sq, sk = case.seqlens_q[index], case.seqlens_k[index]
    seen = visible_keys_per_row(sq, sk, case.mask)
    candidates = [r for r in (0, sq - 1, sq // 2) if seen[r] > 0]
    rng = random.Random(gen_seed)
    for _ in range(4 * count):
        if len(set(candidates)) >= min(count, sq):
            break
        r = rng.randrange(sq)
        if seen[r] > 0:
            candidates.append(r)
    return sorted(set(candidates))[:count]


def check_rows(
    case: AttnCase, inputs: Inputs, out: torch.Tensor, out_layout: str, *, rows_per_sequence: int = 8, seed: int = 0
) -> RowCheck:
    """Compare ``out`` with the fp64 reference on sampled rows of the first and last sequence."""
    import torch

    floor = error_floor(case.dtype)
    lowp_dtype = torch_dtype(case.dtype) if case.dtype != "fp8" else torch.bfloat16
    worst_err, worst_where, lowp_err, checked = 0.0, "nowhere", 0.0, 0
    for index in sorted({0, case.batch - 1}):
        rows_list = _sample_rows(case, index, rows_per_sequence, seed + index)
        if not rows_list:
            continue
        q = sequence(inputs.q, inputs.layout, case, index, "q").detach()
        k = sequence(inputs.k, inputs.layout, case, index, "k").detach()
        v = sequence(inputs.v, inputs.layout, case, index, "k").detach()
        rows = torch.tensor(rows_list, device=q.device)
        ref = attention_rows(q, k, v, case, rows, torch.float64)
        lowp = attention_rows(q, k, v, case, rows, lowp_dtype).to(torch.float64)
        got = sequence(out, out_layout, case, index, "q").detach()[rows].to(torch.float64)
        if not torch.isfinite(got).all():
            bad = (~torch.isfinite(got)).nonzero()[0].tolist()
            where = f"sequence {index}, row {rows_list[bad[0]]}, head {bad[1]}, column {bad[2]}"
            return RowCheck(False, float("inf"), lowp_err, 0.0, checked, where + " (NaN/Inf)")
        err = (got - ref).abs()
        flat = int(err.argmax())
        e = float(err.max())
        if e > worst_err:
            r, h, c = (flat // (err.shape[1] * err.shape[2]), (flat // err.shape[2]) % err.shape[1],
                       flat % err.shape[2])
            worst_err, worst_where = e, f"sequence {index}, row {rows_list[r]}, head {h}, column {c}"
        lowp_err = max(lowp_err, float((lowp - ref).abs().max()))
        checked += len(rows_list)
    allowed = FWD_RATIO * lowp_err + floor
    return RowCheck(worst_err <= allowed, worst_err, lowp_err, allowed, checked, worst_where)


# ---- the fuzzer's oracle: every row, and gradients ---------------------------------------------
BWD_RATIO = 3.0
EMPTY_ROWS = ("zero", "nan", "any")  # what a back end writes for a query that sees no key


@dataclass(frozen=True)
class FullCheck:
    """Every output (and gradient) element against the fp64 reference."""

    ok: bool
    tensor: str  # "out", "dq", "dk", "dv": the worst one
    max_error: float
    lowp_error: float
    allowed: float
    worst: str  # "sequence s, head h, row r, column c"
    problem: str = ""  # set for NaN/Inf, unwritten or wrong empty rows
    by_design: float = 0.0  # the part of ``allowed`` from a FlashAttention backward's D (output_rounding_term)

    @property
    def ratio(self) -> float:
        return self.max_error / self.lowp_error if self.lowp_error > 0 else float("inf")

    def describe(self, case: AttnCase) -> str:
        if self.problem:
            return f"{self.tensor}: {self.problem} at {self.worst}"
        return (f"{self.tensor}: max |got - fp64| = {self.max_error:.3g} at {self.worst}; {case.dtype} math errs"
                f" {self.lowp_error:.3g}; ratio {self.ratio:.2f} (allowed {self.allowed:.3g}"
                + (f", of which {self.by_design:.3g} for D computed from the rounded output)" if self.by_design
                   else ")"))


def _grads(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, case: AttnCase, dtype: torch.dtype,
           grad_out: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
    """Output of one sequence in ``dtype`` and, with ``grad_out``, its dq, dk, dv."""
    import torch

    lq, lk, lv = (t.detach().to(dtype).requires_grad_(grad_out is not None) for t in (q, k, v))
    with torch.enable_grad():
        out = attention_rows(lq, lk, lv, case, None, dtype)
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


def _where(index: int, flat: int, shape: tuple[int, ...], is_q: bool) -> str:
    r, h, c = flat // (shape[1] * shape[2]), (flat // shape[2]) % shape[1], flat % shape[2]
    return f"sequence {index}, head {h}, {'row' if is_q else 'key'} {r}, column {c}"


def check_full(
    case: AttnCase,
    inputs: Inputs,
    out: torch.Tensor,
    layout: str,
    grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None = None,
    *,
    empty_rows: str = "zero",
) -> FullCheck:
    """Compare every element of ``out`` (and the gradients, for fwd+bwd) with the fp64 reference,
    sequence by sequence. Forward within 2x, gradients within 3x the error of the same math in the
    case's dtype, plus the dtype's floor; dq and dk also plus what a FlashAttention backward errs by
    design (:func:`output_rounding_term`). NaN or Inf fail (except where ``empty_rows="nan"``);
    rows that see no key must be what the back end documents: ``zero``, ``nan``, or ``any``."""
    import torch

    if empty_rows not in EMPTY_ROWS:
        raise ValueError(f"empty_rows={empty_rows!r} is not one of {', '.join(EMPTY_ROWS)}")
    floor = error_floor(case.dtype)
    lowp_dtype = torch_dtype(case.dtype) if case.dtype != "fp8" else torch.bfloat16
    names = ("out", "dq", "dk", "dv")
    worst: dict[str, tuple[float, str]] = {n: (0.0, "nowhere") for n in names}
    lowp_err = dict.fromkeys(names, 0.0)
    # Gradients: one unit in the last place at the gradient's own size. A fused kernel accumulates in
    # fp32 and rounds once; the same math in fp16 can be luckier than that on a tiny case. Seen on an
    # H200: SDPA's cuDNN and flash kernels gave the same dq (error 0.0041, |dq| up to ~4 at scale 2)
    # where fp16 math erred 0.00067 -- two independent kernels agreeing is not a bug.
    grad_floor = dict.fromkeys(names, error_floor(case.dtype, grad=True))
    by_design = dict.fromkeys(names, 0.0)  # see output_rounding_term
    for i in range(case.batch):
        q, k, v = (sequence(t, inputs.layout, case, i, w) for t, w in ((inputs.q, "q"), (inputs.k, "k"),
                                                                        (inputs.v, "k")))
        g_out = None if grads is None or inputs.grad_out is None else sequence(inputs.grad_out, inputs.layout,
                                                                                case, i, "q")
        ref = _grads(q, k, v, case, torch.float64, g_out)
        low = _grads(q, k, v, case, lowp_dtype, g_out)
        got = [sequence(out, layout, case, i, "q").detach()]
        if grads is not None:
            got += [sequence(g, inputs.layout, case, i, w).detach() for g, w in zip(grads, "qkk", strict=True)]
        if grads is not None and g_out is not None:
            kernel_out = torch.nan_to_num(got[0].to(torch.float64), nan=0.0, posinf=0.0, neginf=0.0)
            for name, term in zip(("dq", "dk"), output_rounding_term(q, k, case, kernel_out, ref[0], g_out),
                                  strict=True):
                if term.numel():
                    by_design[name] = max(by_design[name], float(term.abs().max()))
        seen = torch.from_numpy(visible_keys_per_row(case.seqlens_q[i], case.seqlens_k[i], case.mask) > 0)
        for name, g, r, lo in zip(names, got, ref, low, strict=False):
            g64 = g.to(torch.float64)
            if name in ("out", "dq"):
                empty = ~seen.to(g.device)
                if empty.any():
                    rows = g64[empty]
                    bad = {"zero": rows != 0, "nan": ~torch.isnan(rows),
                           "any": torch.zeros_like(rows, dtype=torch.bool)}
                    if name == "out" and bad[empty_rows].any():
                        row = int(empty.nonzero()[0])
                        value = float(rows.abs().max())
                        return FullCheck(False, name, float("inf"), 0.0, 0.0, f"sequence {i}, row {row}",
                                         f"a row that sees no key is not {empty_rows} (max |value| {value:.3g})")
                    g64, r, lo = g64[~empty], r[~empty.to(r.device)], lo[~empty.to(lo.device)]
            if not torch.isfinite(g64).all():
                flat = int((~torch.isfinite(g64)).reshape(-1).nonzero()[0])
                return FullCheck(False, name, float("inf"), 0.0, 0.0, _where(i, flat, tuple(g64.shape), name != "dk"
                                 and name != "dv"), "NaN/Inf (an unwritten or overflowed element)")
            if g64.numel() == 0:
                continue
            if name != "out":
                size = float(r.abs().max())
                grad_floor[name] = max(grad_floor[name], error_floor(case.dtype, grad=True) * size)
            err = (g64 - r).abs()
            e = float(err.max())
            if e > worst[name][0]:
                worst[name] = (e, _where(i, int(err.argmax()), tuple(err.shape), name in ("out", "dq")))
            lowp_err[name] = max(lowp_err[name], float((lo.to(torch.float64) - r).abs().max()))
    result = None
    for name in names:
        ratio = FWD_RATIO if name == "out" else BWD_RATIO
        allowed = ratio * lowp_err[name] + (floor if name == "out" else grad_floor[name]) + by_design[name]
        check = FullCheck(worst[name][0] <= allowed, name, worst[name][0], lowp_err[name], allowed, worst[name][1],
                          by_design=by_design[name])
        if not check.ok:
            return check
        if name == "out":
            result = check
    assert result is not None
    return result
