"""The known-failure ledger (pytest_attn.fuzz.ledger): entries cover their examples, by back end and
predicate."""

from __future__ import annotations

import pytest

from pytest_attn.core.case import AttnCase, Mask
from pytest_attn.core.codec import case_from_json
from pytest_attn.fuzz.ledger import LEDGER, KnownFailure, known_failure


def test_ledger_covers_by_backend_and_predicate():
    entry = KnownFailure("lib-x", "head dim 72", lambda c: c.head_dim_qk == 72, example="{}", reason="upstream bug",
                         link="https://example.org/issue/1")
    c72 = AttnCase.dense(backend="lib-x", shape="s", batch=1, seqlen_q=4, heads_q=1, head_dim=72)
    assert known_failure(c72, [entry]) is entry
    assert known_failure(AttnCase.dense(backend="lib-y", shape="s", batch=1, seqlen_q=4, heads_q=1, head_dim=72),
                         [entry]) is None
    assert known_failure(c72) is None  # the shipped ledger has no entry for lib-x


def test_shipped_ledger_entries_are_complete_and_cover_their_examples():
    assert LEDGER
    for entry in LEDGER:
        case, _ = case_from_json(entry.example)
        assert entry.matches(case), entry.covers
        assert entry.reason and entry.link.startswith("https://")
    window = AttnCase("flash-attn", "s", (8,), (4,), 1, 1, 16, 16, mask=Mask.window(2, 0))
    assert known_failure(window) is not None
    assert known_failure(AttnCase("flash-attn", "s", (4,), (8,), 1, 1, 16, 16, mask=Mask.window(2, 0))) is None


@pytest.mark.parametrize(("backend", "sq", "hq", "hkv", "d", "sk", "covered"), [
    ("flash-attn", 2, 1, 1, 16, 257, True),
    ("flash-attn", 1, 1, 1, 16, 257, False),  # one query, no GQA: no split-KV rows to get wrong (passes on an H200)
    ("flash-attn", 1, 2, 1, 16, 257, True),  # one query, GQA 2:1: folded into two rows (fails on an H200)
    ("flash-attn", 2, 1, 1, 64, 257, False),
    ("flash-attn", 2, 1, 1, 16, 256, False),
    ("flash-attn-varlen", 1, 2, 1, 16, 257, True),
    ("flash-attn-varlen", 2, 1, 1, 16, 257, False),  # the varlen front end splits only the folded case
    ("flash-attn-varlen", 1, 1, 1, 32, 300, False),
    ("flash-attn-varlen", 1, 2, 1, 16, 257, "window"),  # a window keeps flash-attn from folding
])
def test_split_kv_ledger_covers_the_folded_single_query(backend, sq, hq, hkv, d, sk, covered):
    mask = Mask.window(8, 0) if covered == "window" else Mask.none()
    case = AttnCase(backend, "s", (sq,), (sk,), hq, hkv, d, d, "fp16", mask)
    assert (known_failure(case) is not None) == (covered is True)
