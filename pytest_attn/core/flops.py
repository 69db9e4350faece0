"""The one FLOP and byte model. Pure: no torch, no GPU.

Convention ``exact-mask`` (the one every figure uses; its name is recorded in every result)
--------------------------------------------------------------------------------------------
Count the (query, key) pairs the mask leaves visible, per sequence and per query head, exactly:

* forward: ``2 * (d_qk + d_v)`` FLOPs per visible pair per query head
  (``2*d_qk`` for the ``q . k`` dot product, ``2*d_v`` for ``p . v``; softmax is not counted);
* backward: ``2.5 x`` forward (five matrix products instead of two), so ``fwd+bwd = 3.5 x fwd``;
* causal is bottom-right aligned: row ``i`` sees ``min(sk, max(0, i + 1 + sk - sq))`` keys;
  sliding windows clip both sides; custom masks count their True entries; ragged (varlen) batches
  sum over sequences; GQA/MQA changes bytes, not FLOPs (FLOPs are per *query* head).

This is the convention of flash-attn's Hopper/FA4 and FlashInfer benchmarks. A sink logit per head adds
no matrix product (one more exponential per row), so sinks change no FLOP count.

Convention ``flashmla`` (absorbed MLA, ``latent_kv`` cases)
-----------------------------------------------------------
FlashMLA's own decode benchmark (its test_flash_mla script): ``s_q * total_seqlens * h_q * (d + dv) * 2`` with
d = 576 (latent + rope) and dv = 512 -- every (query, key) pair, whatever the mask -- and bytes
``(total_seqlens * h_kv * d + b * s_q * h_q * d + b * s_q * h_q * dv) * elem``: the latent cache read once
(its values are its first 512 columns, not a second tensor), q read and o written. A latent case's
FLOPs and minimal bytes follow it, so MFU and TB/s stand beside FlashMLA's published figures; for
one query per request (decode) it equals ``exact-mask``.

Convention ``fa2`` (reported beside it, for comparison with published figures)
------------------------------------------------------------------------------
flash-attn v2's benchmark script: ``4 * b * sq * sk * h * d`` (generalised here to
``2 * sq * sk * h * (d_qk + d_v)`` per sequence), halved for any causal mask, not discounted for
windows or custom masks; backward ``2.5 x``. It overstates causal work when ``sq != sk``.

Minimal bytes
-------------
Each tensor read or written once from device memory: forward reads q, k, v and writes o; backward
reads q, k, v, o and dO and writes dq, dk, dv (the per-row softmax statistics, 4 bytes per row per
head, are left out as negligible). Only the keys and values some query sees need reading: a decode step
under a 128-token window reads 128 of an 8,192-token cache (counted whole, FA4's GPT-OSS window decode
read 1162 % of an H200's bandwidth: docs/gpu-validation.md#back-ends-and-kernels). What is allocated is
:func:`tensor_bytes`. A custom mask that hides something adds one *bit* per (query,
key) pair: its smallest general form, the packed mask (a dense bool mask is 8x that; a block-sparse
form can be less). An all-True mask adds nothing: the minimal call passes no mask. k and v count
``heads_kv`` heads, so GQA lowers bytes. An fp8 KV cache counts one byte a key or value element (q and o
keep the case's dtype); sinks add their fp32 logits (4 bytes per query head); a latent case reads no
separate values.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING

from .case import AttnCase, Mask

if TYPE_CHECKING:
    import numpy as np

CONVENTION = "exact-mask"
FA2_CONVENTION = "fa2"
MLA_CONVENTION = "flashmla"
BWD_FACTOR = 2.5


def visible_keys_per_row(seqlen_q: int, seqlen_k: int, mask: Mask) -> np.ndarray:
    """How many keys each query row sees, as a read-only int64 array of length ``seqlen_q``."""
    import numpy as np
    if mask.kind == "none":
        return np.full(seqlen_q, seqlen_k, dtype=np.int64)
    if mask.kind == "custom":
        return _custom_counts(seqlen_q, seqlen_k, mask)
    return _window_counts(seqlen_q, seqlen_k, mask)


@functools.lru_cache(maxsize=64)
def _custom_counts(seqlen_q: int, seqlen_k: int, mask: Mask) -> np.ndarray:
    """Row counts of a custom mask, counted once per (length, mask): a 111,856-token mask takes
    seconds to scan, and every back end asks. Custom masks are identified by name (see Mask)."""
    import numpy as np
    block = max(1, (1 << 26) // max(1, seqlen_k))  # blocks of rows: memory stays bounded at any length
    counts = [
        mask.rows(seqlen_q, seqlen_k, np.arange(start, min(seqlen_q, start + block))).sum(axis=1, dtype=np.int64)
        for start in range(0, seqlen_q, block)
    ]
    out = np.concatenate(counts) if counts else np.zeros(0, dtype=np.int64)
    out.flags.writeable = False
    return out


def _window_counts(seqlen_q: int, seqlen_k: int, mask: Mask) -> np.ndarray:
    import numpy as np
    left, right = mask.window_left, mask.window_right
    rows = np.arange(seqlen_q, dtype=np.int64)
    diag = rows + (seqlen_k - seqlen_q)  # the key aligned with each query (bottom-right)
    lo = np.zeros_like(rows) if left < 0 else np.maximum(diag - left, 0)
    hi = np.full_like(rows, seqlen_k - 1) if right < 0 else np.minimum(diag + right, seqlen_k - 1)
    return np.maximum(hi - lo + 1, 0)


def keys_read(seqlen_q: int, seqlen_k: int, mask: Mask) -> int:
    """How many keys of one sequence some query sees: the ones a kernel must read. A band mask's rows see
    intervals that move by one key a row, so their union is one interval."""
    import numpy as np
    if mask.kind == "none":
        return seqlen_k
    if mask.kind == "custom":
        return _custom_columns(seqlen_q, seqlen_k, mask)
    left, right = mask.window_left, mask.window_right
    rows = np.arange(seqlen_q, dtype=np.int64)[_window_counts(seqlen_q, seqlen_k, mask) > 0]
    if not rows.size:
        return 0
    diag = rows + (seqlen_k - seqlen_q)
    lo = 0 if left < 0 else max(int(diag[0]) - left, 0)
    hi = seqlen_k - 1 if right < 0 else min(int(diag[-1]) + right, seqlen_k - 1)
    return hi - lo + 1


@functools.lru_cache(maxsize=64)
def _custom_columns(seqlen_q: int, seqlen_k: int, mask: Mask) -> int:
    """Keys a custom mask leaves visible to some query (blocks of rows, as :func:`_custom_counts`)."""
    import numpy as np
    block = max(1, (1 << 26) // max(1, seqlen_k))
    seen = np.zeros(seqlen_k, dtype=bool)
    for start in range(0, seqlen_q, block):
        seen |= mask.rows(seqlen_q, seqlen_k, np.arange(start, min(seqlen_q, start + block))).any(axis=0)
    return int(seen.sum())


def visible_pairs(seqlen_q: int, seqlen_k: int, mask: Mask) -> int:
    """Exact number of visible (query, key) pairs of one sequence, one head."""
    if mask.kind == "none":
        return seqlen_q * seqlen_k
    return int(visible_keys_per_row(seqlen_q, seqlen_k, mask).sum())


@dataclass(frozen=True)
class Work:
    """What one call of a case must do: FLOPs (both conventions) and minimal bytes."""

    flops: int
    fa2_flops: int
    min_bytes: int
    visible_pairs: int  # summed over sequences, per head
    total_pairs: int
    convention: str = CONVENTION

    @property
    def arithmetic_intensity(self) -> float:
        """FLOPs per minimal byte."""
        return self.flops / self.min_bytes

    @property
    def density(self) -> float:
        """Fraction of (query, key) pairs the mask leaves visible."""
        return self.visible_pairs / self.total_pairs


def _direction_factor(case: AttnCase) -> float:
    return 1.0 + BWD_FACTOR if case.direction == "fwd+bwd" else 1.0


def _case_pairs(case: AttnCase) -> tuple[int, int]:
    """(visible, total) (query, key) pairs summed over the sequences, per head."""
    lengths = list(zip(case.seqlens_q, case.seqlens_k, strict=True))
    visible = sum(visible_pairs(sq, sk, case.mask) for sq, sk in lengths)
    return visible, sum(sq * sk for sq, sk in lengths)


def _flops_for_pairs(case: AttnCase, pairs: int) -> int:
    return round(2 * (case.head_dim_qk + case.head_dim_v) * case.heads_q * pairs * _direction_factor(case))


def convention(case: AttnCase) -> str:
    """The FLOP convention of ``case``: ``flashmla`` for absorbed MLA, else ``exact-mask``."""
    return MLA_CONVENTION if case.latent_kv else CONVENTION


def flops(case: AttnCase) -> int:
    """FLOPs of one timed call (forward, or forward + backward) in :func:`convention`'s convention."""
    visible, total = _case_pairs(case)
    return _flops_for_pairs(case, total if case.latent_kv else visible)


def _fa2_for_total(case: AttnCase, total_pairs: int) -> int:
    halved = 0.5 if case.mask.kind == "causal" else 1.0
    return round(_flops_for_pairs(case, total_pairs) * halved)


def fa2_flops(case: AttnCase) -> int:
    """FLOPs as flash-attn v2's benchmark counts them (see module docstring)."""
    return _fa2_for_total(case, _case_pairs(case)[1])


def min_bytes(case: AttnCase) -> int:
    """Minimal device-memory traffic of one timed call (see module docstring): the keys and values some query
    sees."""
    read = sum(keys_read(sq, sk, case.mask) for sq, sk in zip(case.seqlens_q, case.seqlens_k, strict=True))
    return _bytes(case, read)


def tensor_bytes(case: AttnCase) -> int:
    """What one call's tensors hold (every key of the cache, seen or not), counted as :func:`min_bytes` counts
    traffic: the memory an input set takes, and what it puts through the L2."""
    return _bytes(case, case.total_k)


def _bytes(case: AttnCase, keys: int) -> int:
    e, kv_e = case.elem_bytes, case.kv_elem_bytes
    q = case.total_q * case.heads_q * case.head_dim_qk * e
    k = keys * case.heads_kv * case.head_dim_qk * kv_e
    v = 0 if case.latent_kv else keys * case.heads_kv * case.head_dim_v * kv_e
    o = case.total_q * case.heads_q * case.head_dim_v * e
    sinks = 4 * case.heads_q if case.sinks else 0
    mask = 0
    if case.mask.kind == "custom":
        mask = sum(
            -(-sq * sk // 8)
            for sq, sk in zip(case.seqlens_q, case.seqlens_k, strict=True)
            if visible_pairs(sq, sk, case.mask) < sq * sk
        )
    appended = 0
    if case.cache is not None and case.cache.append:  # the new keys and values are written into the cache too
        columns = case.head_dim_qk + (0 if case.latent_kv else case.head_dim_v)
        appended = case.batch * case.cache.append * case.heads_kv * columns * kv_e
    fwd = q + k + v + o + mask + appended + sinks
    if case.direction == "fwd":
        return fwd
    # backward: read q, k, v, o, dO (+ mask); write dq, dk, dv
    bwd = q + k + v + o + o + mask + q + k + v
    return fwd + bwd


def work(case: AttnCase) -> Work:
    pairs, total = _case_pairs(case)  # counted once: long causal cases walk every row
    return Work(
        flops=_flops_for_pairs(case, total if case.latent_kv else pairs),
        fa2_flops=_fa2_for_total(case, total),
        min_bytes=min_bytes(case),
        visible_pairs=pairs,
        total_pairs=total,
        convention=convention(case),
    )
