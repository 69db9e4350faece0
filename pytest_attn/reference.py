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


def error_floor(dtype: str) -> float:
    """The absolute part of the check's allowance for a dtype."""
    import torch

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

    sq, sk = q.shape[0], k.shape[0]
    group = case.heads_q // case.heads_kv
    qc = q.to(compute_dtype)
    kc = k.to(compute_dtype).repeat_interleave(group, dim=1)
    vc = v.to(compute_dtype).repeat_interleave(group, dim=1)
    if rows is not None:
        qc = qc[rows]
    scores = torch.einsum("qhd,khd->hqk", qc, kc) * case.scale
    if case.mask.kind != "none":
        visible = dense_mask(case.mask, sq, sk, q.device, rows)
        scores = scores.masked_fill(~visible, float("-inf"))
    probs = torch.softmax(scores, dim=-1).nan_to_num(0.0)  # rows with no visible key -> 0
    return torch.einsum("hqk,khd->qhd", probs, vc)


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
