"""The error rule: a back end's output (and gradients) against the fp64 reference.

Rule (flash-attention's own tests): the back end's largest error against an fp64 reference must be
at most ``2 x`` (gradients ``3 x``) the error of the same math run in the case's dtype, plus an
absolute floor: one unit of the dtype's precision (eps) for 16-bit types, ``1e-5`` for fp32, where a
fused kernel's own summation order and fast ``exp`` differ from plain math by a few units in the last
place (seen on an H200: SDPA's efficient kernel at 5.8e-7 where fp32 math erred by 1.9e-7). A real
bug (a wrong mask or head mapping) errs by 0.01 to 1. NaN or Inf never pass.

An fp8 (e4m3) KV cache: the reference dequantises it exactly (``k_fp8 * k_scale`` in fp64), and "the same
math in the case's dtype" dequantises it in the query's dtype -- the quantisation is the input's, not the
kernel's error (``docs/fuzzing.md``).

* :func:`check_rows` -- sampled rows, before every benchmarked call is timed (the gradients':
  :func:`.grad_check.check_grad_rows`). Rows that see no key are left out there: each back end's
  behaviour on them is checked by the fuzzer.
* :func:`check_full` -- every element and gradient: the fuzzer's oracle.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from ..core.case import AttnCase
from ..core.flops import visible_keys_per_row
from ..core.layouts import Inputs, sequence, torch_dtype
from ..core.record import Check
from .reference import (
    BWD_RATIO,
    FWD_RATIO,
    Extras,
    attention_and_grads,
    attention_rows,
    error_floor,
    output_rounding_term,
)

if TYPE_CHECKING:
    import torch


@dataclass(frozen=True)
class RowCheck:
    ok: bool
    max_error: float
    lowp_error: float
    allowed: float
    rows_checked: int
    worst: str  # "sequence s, row r, head h, column c"
    tensor: str = "out"  # "out", or the gradient "dq", "dk", "dv"
    problem: str = ""  # NaN/Inf, where the whole tensor was checked
    kv_heads_checked: int = 0  # the gradient check: the fewest kv heads (with their query heads) a sequence's covered

    def summary(self) -> Check:
        """What the result record keeps of the check."""
        return Check(self.rows_checked, self.max_error, self.lowp_error, self.allowed, self.worst)

    def message(self, case: AttnCase) -> str:
        what = "output" if self.tensor == "out" else f"gradient {self.tensor}"
        head = f"{case.id} gives a wrong {what} before timing"
        if self.problem:
            return (f"{head}: {self.problem} at {self.worst}. A benchmark of a wrong kernel is not reported; check"
                    f" the back end on {case.describe()}.")
        ratio = FWD_RATIO if self.tensor == "out" else BWD_RATIO
        return (
            f"{head}: max |{self.tensor} - ref| = {self.max_error:.3g} at {self.worst}, allowed {self.allowed:.3g}"
            f" ({ratio:g} x the {case.dtype} math error {self.lowp_error:.3g} + the {case.dtype} floor). A benchmark"
            f" of a wrong kernel is not reported; check the back end's mask and layout handling for"
            f" {case.describe()}."
        )


def check_finite(tensors: dict[str, torch.Tensor]) -> RowCheck | None:
    """Every element of every tensor finite (one reduction each, on its device); where not, the first
    NaN/Inf found -- an element a kernel never wrote, or one that overflowed."""
    import torch

    for name, t in tensors.items():
        if bool(torch.isfinite(t).all()):
            continue
        bad = (~torch.isfinite(t)).nonzero()[0].tolist()
        value = float(t[tuple(bad)])
        return RowCheck(False, float("inf"), 0.0, 0.0, 0, f"index {bad} of {name} {tuple(t.shape)}", name,
                        f"{value} (the whole tensor was checked: {int((~torch.isfinite(t)).sum())} element(s)"
                        " not finite)")
    return None


def only_rows_with_keys(case: AttnCase, layout: str, tensors: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """``tensors`` with the output's and dq's rows that see no key zeroed: what a kernel writes there is
    its documented convention (zero, NaN), checked by the fuzzer, not a wrong value."""
    import numpy as np
    import torch

    seen = [visible_keys_per_row(sq, sk, case.mask) > 0 for sq, sk in zip(case.seqlens_q, case.seqlens_k,
                                                                            strict=True)]
    if all(s.all() for s in seen):
        return tensors
    rows = torch.from_numpy(np.concatenate(seen)) if layout == "thd" else torch.from_numpy(np.stack(seen))
    out = dict(tensors)
    for name in ("out", "dq"):
        if name in out:
            t = out[name]
            keep = rows.to(t.device)
            keep = keep[:, None, None] if layout == "thd" else keep[:, :, None, None] if layout == "bshd" else \
                keep[:, None, :, None]
            out[name] = torch.where(keep, t, torch.zeros((), dtype=t.dtype, device=t.device))
    return out


def _sample(count: int, length: int, keep: Callable[[int], bool], seed: int) -> list[int]:
    """First, last, middle and random indices below ``length`` that ``keep`` accepts."""
    import random

    candidates = [r for r in (0, length - 1, length // 2) if keep(r)]
    rng = random.Random(seed)
    for _ in range(4 * count):
        if len(set(candidates)) >= min(count, length):
            break
        r = rng.randrange(length)
        if keep(r):
            candidates.append(r)
    return sorted(set(candidates))[:count]


def _sample_rows(case: AttnCase, index: int, count: int, gen_seed: int) -> list[int]:
    """Query rows to check: first, last, middle and random ones, leaving out rows that see no key."""
    seen = visible_keys_per_row(case.seqlens_q[index], case.seqlens_k[index], case.mask)
    return _sample(count, case.seqlens_q[index], lambda r: bool(seen[r] > 0), gen_seed)


@dataclass
class _Worst:
    """The worst error so far of one tensor, and the same math's error in the case's dtype."""

    name: str
    error: float = 0.0
    where: str = "nowhere"
    lowp: float = 0.0
    size: float = 0.0  # the largest |reference| element, for the gradient floor

    def add(self, got: torch.Tensor, ref: torch.Tensor, low: torch.Tensor, index: int, labels: list[int],
            kind: str, heads: list[int] | None = None) -> RowCheck | None:
        """``heads``: the case's head index of each head the tensors hold (all of them when None)."""
        import torch

        def head(h: int) -> int:
            return heads[h] if heads is not None else h

        got = got.to(torch.float64)
        if not torch.isfinite(got).all():
            bad = (~torch.isfinite(got)).nonzero()[0].tolist()
            where = f"sequence {index}, {kind} {labels[bad[0]]}, head {head(bad[1])}, column {bad[2]}"
            return RowCheck(False, float("inf"), self.lowp, 0.0, 0, where, self.name, "NaN/Inf")
        err = (got - ref).abs()
        if float(err.max()) > self.error:
            r, h, c = (int(x) for x in torch.unravel_index(err.argmax(), err.shape))
            self.error = float(err.max())
            self.where = f"sequence {index}, {kind} {labels[r]}, head {head(h)}, column {c}"
        self.lowp = max(self.lowp, float((low.to(torch.float64) - ref).abs().max()))
        self.size = max(self.size, float(ref.abs().max()))
        return None

    def verdict(self, allowed: float, rows: int) -> RowCheck:
        return RowCheck(self.error <= allowed, self.error, self.lowp, allowed, rows, self.where, self.name)


def check_rows(
    case: AttnCase, inputs: Inputs, out: torch.Tensor, out_layout: str, *, rows_per_sequence: int = 8, seed: int = 0,
    sequences: Sequence[int] | None = None,
) -> RowCheck:
    """Compare ``out`` with the fp64 reference on sampled rows of every sequence (or of ``sequences``), every
    head."""
    import torch

    lowp_dtype = torch_dtype(case.dtype) if case.dtype != "fp8" else torch.bfloat16
    worst, checked = _Worst("out"), 0
    for index in (range(case.batch) if sequences is None else sequences):
        rows_list = _sample_rows(case, index, rows_per_sequence, seed + index)
        if not rows_list:
            continue
        q, k, v = (sequence(t, inputs.layout, case, index, w).detach()
                   for t, w in ((inputs.q, "q"), (inputs.k, "k"), (inputs.v, "k")))
        rows = torch.tensor(rows_list, device=q.device)
        ref = attention_rows(q, k, v, case, rows, torch.float64, Extras.of(inputs))
        lowp = attention_rows(q, k, v, case, rows, lowp_dtype, Extras.of(inputs))
        got = sequence(out, out_layout, case, index, "q").detach()[rows]
        problem = worst.add(got, ref, lowp, index, rows_list, "row")
        if problem is not None:
            return problem
        checked += len(rows_list)
    return worst.verdict(FWD_RATIO * worst.lowp + error_floor(case.dtype), checked)


# ---- the fuzzer's oracle: every row, and gradients ---------------------------------------------
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
            return f"{self.tensor}: {self.problem}" + (f" at {self.worst}" if self.worst else "")
        allowed = (f"allowed {self.allowed:.3g}" + (f", of which {self.by_design:.3g} for D computed from the rounded"
                                                    " output" if self.by_design else ""))
        if self.max_error == 0:
            return f"{self.tensor}: every element equals the fp64 reference ({allowed})"
        versus = (f"{case.dtype} math errs {self.lowp_error:.3g}, this is {self.ratio:.3g}x that" if self.lowp_error > 0
                  else f"{case.dtype} math is exact here")
        return f"{self.tensor}: max |got - fp64| = {self.max_error:.3g} at {self.worst}; {versus} ({allowed})"


def _where(index: int, flat: int, shape: tuple[int, ...], is_q: bool) -> str:
    r, h, c = flat // (shape[1] * shape[2]), (flat // shape[2]) % shape[1], flat % shape[2]
    return f"sequence {index}, head {h}, {'row' if is_q else 'key'} {r}, column {c}"


TENSORS = ("out", "dq", "dk", "dv")


@dataclass
class _Tally:
    """The worst error per tensor so far, and what is allowed for it, over the sequences of a case."""

    dtype: str
    worst: dict[str, tuple[float, str]] = field(default_factory=lambda: {n: (0.0, "nowhere") for n in TENSORS})
    lowp: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TENSORS, 0.0))
    # Gradients: one unit in the last place at the gradient's own size. A fused kernel accumulates in
    # fp32 and rounds once; the same math in fp16 can be luckier than that on a tiny case. Seen on an
    # H200: SDPA's cuDNN and flash kernels gave the same dq (error 0.0041, |dq| up to ~4 at scale 2)
    # where fp16 math erred 0.00067 -- two independent kernels agreeing is not a bug.
    grad_floor: dict[str, float] = field(default_factory=dict)
    by_design: dict[str, float] = field(default_factory=lambda: dict.fromkeys(TENSORS, 0.0))  # output_rounding_term

    def add(self, name: str, index: int, got: torch.Tensor, ref: torch.Tensor, low: torch.Tensor) -> FullCheck | None:
        """One sequence's ``name`` tensor (fp64, rows without keys already left out); a NaN/Inf fails."""
        import torch

        if not torch.isfinite(got).all():
            flat = int((~torch.isfinite(got)).reshape(-1).nonzero()[0])
            return FullCheck(False, name, float("inf"), 0.0, 0.0, _where(index, flat, tuple(got.shape), name in (
                "out", "dq")), "NaN/Inf (an unwritten or overflowed element)")
        if got.numel() == 0:
            return None
        unit = error_floor(self.dtype, grad=True)
        if name != "out":
            self.grad_floor[name] = max(self.grad_floor.get(name, unit), unit * float(ref.abs().max()))
        err = (got - ref).abs()
        if float(err.max()) > self.worst[name][0]:
            where = _where(index, int(err.argmax()), tuple(err.shape), name in ("out", "dq"))
            self.worst[name] = (float(err.max()), where)
        self.lowp[name] = max(self.lowp[name], float((low.to(torch.float64) - ref).abs().max()))
        return None

    def verdict(self) -> FullCheck:
        """The first tensor over its allowance, else the output's check."""
        result = None
        for name in TENSORS:
            ratio = FWD_RATIO if name == "out" else BWD_RATIO
            floor = error_floor(self.dtype) if name == "out" else self.grad_floor.get(
                name, error_floor(self.dtype, grad=True))
            allowed = ratio * self.lowp[name] + floor + self.by_design[name]
            check = FullCheck(self.worst[name][0] <= allowed, name, self.worst[name][0], self.lowp[name], allowed,
                              self.worst[name][1], by_design=self.by_design[name])
            if not check.ok:
                return check
            result = result or check
        assert result is not None
        return result


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
    if empty_rows not in EMPTY_ROWS:
        raise ValueError(f"empty_rows={empty_rows!r} is not one of {', '.join(EMPTY_ROWS)}")
    tally = _Tally(case.dtype)
    for i in range(case.batch):
        problem = _check_sequence(case, inputs, out, layout, grads, i, empty_rows, tally)
        if problem is not None:
            return problem
    return tally.verdict()


def _check_sequence(case: AttnCase, inputs: Inputs, out: torch.Tensor, layout: str,
                    grads: tuple[torch.Tensor, torch.Tensor, torch.Tensor] | None, i: int, empty_rows: str,
                    tally: _Tally) -> FullCheck | None:
    """Sequence ``i``: its output and gradients against the reference, into ``tally``."""
    import torch

    q, k, v = (sequence(t, inputs.layout, case, i, w) for t, w in ((inputs.q, "q"), (inputs.k, "k"), (inputs.v, "k")))
    g_out = None if grads is None or inputs.grad_out is None else sequence(inputs.grad_out, inputs.layout, case, i,
                                                                            "q")
    extras = Extras.of(inputs)
    ref = attention_and_grads(q, k, v, case, torch.float64, g_out, extras)
    low = attention_and_grads(q, k, v, case, torch_dtype(case.dtype) if case.dtype != "fp8" else torch.bfloat16,
                              g_out, extras)
    got = [sequence(out, layout, case, i, "q").detach()]
    if grads is not None:
        got += [sequence(g, inputs.layout, case, i, w).detach() for g, w in zip(grads, "qkk", strict=True)]
    if grads is not None and g_out is not None:
        kernel_out = torch.nan_to_num(got[0].to(torch.float64), nan=0.0, posinf=0.0, neginf=0.0)
        for name, term in zip(("dq", "dk"), output_rounding_term(q, k, case, kernel_out, ref[0], g_out), strict=True):
            if term.numel():
                tally.by_design[name] = max(tally.by_design[name], float(term.abs().max()))
    seen = torch.from_numpy(visible_keys_per_row(case.seqlens_q[i], case.seqlens_k[i], case.mask) > 0)
    for name, g, r, lo in zip(TENSORS, got, ref, low, strict=False):
        g64 = g.to(torch.float64)
        empty = ~seen.to(g.device)
        if name in ("out", "dq") and empty.any():
            if name == "out":
                problem = _empty_rows_problem(g64[empty], empty, empty_rows, i)
                if problem is not None:
                    return problem
            g64, r, lo = g64[~empty], r[~empty.to(r.device)], lo[~empty.to(lo.device)]
        problem = tally.add(name, i, g64, r, lo)
        if problem is not None:
            return problem
    return None


def _empty_rows_problem(rows: torch.Tensor, empty: torch.Tensor, empty_rows: str, i: int) -> FullCheck | None:
    """Rows that see no key must hold what the back end documents."""
    import torch

    bad = {"zero": rows != 0, "nan": ~torch.isnan(rows), "any": torch.zeros_like(rows, dtype=torch.bool)}
    if not bad[empty_rows].any():
        return None
    row, value = int(empty.nonzero()[0]), float(rows.abs().max())
    return FullCheck(False, "out", float("inf"), 0.0, 0.0, f"sequence {i}, row {row}",
                     f"a row that sees no key is not {empty_rows} (max |value| {value:.3g})")
