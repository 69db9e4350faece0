"""Known failures: fuzz findings that are a library's bug, not ours.

Each entry names the back end, which drawn cases it covers (a predicate, described in words), a
concrete example that fails today, why, and a link to the upstream report. The fuzz property skips
covered cases; ``suites/test_fuzz_ledger.py`` runs each entry's example and expects it to fail, so an
entry whose bug has been fixed fails loudly until it is removed from here.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from ..core.case import AttnCase, Mask
from ..core.codec import case_json


@dataclass(frozen=True)
class KnownFailure:
    backend: str
    covers: str  # the predicate, in words
    predicate: Callable[[AttnCase], bool]
    example: str  # a case JSON (pytest_attn.core.codec.case_json) that fails today
    reason: str
    link: str

    def matches(self, case: AttnCase) -> bool:
        return case.backend == self.backend and self.predicate(case)


def _window_with_more_queries(case: AttnCase) -> bool:
    return case.mask.kind == "window" and any(q > k for q, k in zip(case.seqlens_q, case.seqlens_k, strict=True))


def _small_head_split_kv(case: AttnCase) -> bool:
    return case.head_dim_qk <= 32 and _query_rows(case) >= 2 and case.max_seqlen_k > 256


def _folded(case: AttnCase) -> bool:
    # flash-attn's "seqlenq_ngroups_swapped": one query, more query than kv heads, no window -- the query
    # heads of each kv head are folded into the query dimension
    return case.max_seqlen_q == 1 and case.heads_q > case.heads_kv and case.mask.kind != "window"


def _query_rows(case: AttnCase) -> int:
    return case.heads_q // case.heads_kv if _folded(case) else case.max_seqlen_q


def _small_head_varlen_decode(case: AttnCase) -> bool:
    # the varlen front end takes the split-KV path only for that folded single-query case
    return case.head_dim_qk <= 32 and _folded(case) and case.max_seqlen_k > 256


def _example(backend: str, sq: int, sk: int, d: int, mask: Mask) -> str:
    return case_json(AttnCase(backend, "fuzz", (sq,), (sk,), 1, 1, d, d, "fp16", mask), 0)


_WINDOW_REASON = (
    "flash-attn's C++ front end rewrites window bounds against seqlen_k (a right bound >= seqlen_k becomes"
    " unbounded, an unbounded one becomes seqlen_k), which is wrong when seqlen_q > seqlen_k under its own"
    " bottom-right alignment: rows that should see no key see some, and rows lose keys (found on an H200,"
    " flash-attn 2.8.3 and torch 2.11's varlen_attn, which carries the same code)"
)
_SPLIT_REASON = (
    "the split-KV forward for head dims <= 32 gives wrong rows once the cache spans a second 256-key block"
    " (seqlen_q 2, seqlen_k 257, d 16/32: error 0.028, 240x fp16 math; num_splits=1, d >= 64 and seqlen_q 1"
    " are right; seqlen_q 1 with GQA is wrong too, its query heads being folded into seqlen_q) -- found on an"
    " H200 with flash-attn 2.8.3; the same shape class crashes in the upstream report"
)
#: Found by the gpu profile on an H200 (flash-attn 2.8.3): the same out error as flash_attn_func's
_VARLEN_DECODE_EXAMPLE = ('{"backend":"flash-attn-varlen","seqlens_q":[1],"seqlens_k":[257],"heads_q":2,"heads_kv":1,'
                          '"head_dim_qk":16,"head_dim_v":16,"dtype":"fp16","mask":"full","direction":"fwd+bwd",'
                          '"softmax_scale":null,"seed":0}')

#: The ledger. Each entry needs a failing example, a reason and a link.
LEDGER: tuple[KnownFailure, ...] = (
    *(KnownFailure(name, "sliding window with seqlen_q > seqlen_k", _window_with_more_queries,
                   _example(name, 3, 1, 16, Mask.window(-1, 1)) if name != "varlen"
                   else _example(name, 5, 2, 16, Mask.window(0, -1)),
                   _WINDOW_REASON, "https://github.com/Dao-AILab/flash-attention/issues/895")
      for name in ("flash-attn", "flash-attn-varlen", "varlen")),
    *(KnownFailure(name, "head dim <= 32, seqlen_q >= 2, split-KV over > 256 keys", _small_head_split_kv,
                   _example(name, 2, 257, 16, Mask.none()), _SPLIT_REASON,
                   "https://github.com/Dao-AILab/flash-attention/issues/1076")
      for name in ("flash-attn", "flash-attn-kvcache", "flash-attn-paged")),
    KnownFailure("flash-attn-varlen", "head dim <= 32, one query with GQA, split-KV over > 256 keys",
                 _small_head_varlen_decode, _VARLEN_DECODE_EXAMPLE, _SPLIT_REASON,
                 "https://github.com/Dao-AILab/flash-attention/issues/1076"),
)


def known_failure(case: AttnCase, ledger: Sequence[KnownFailure] = LEDGER) -> KnownFailure | None:
    return next((entry for entry in ledger if entry.matches(case)), None)
