"""Strategies: argument checks, shrinking to small readable cases, replayable mask ids; the ledger."""

from __future__ import annotations

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from pytest_attn.case import AttnCase, Mask
from pytest_attn.fuzz import case_from_json, case_json
from pytest_attn.ledger import KnownFailure, known_failure
from pytest_attn.strategies import (
    Space,
    attn_cases,
    head_layouts,
    lengths,
    mask_from_id,
    masks,
    varlen_lengths,
)

SPACE = Space(dtypes=("fp32", "bf16"), head_dims=(8, 32), mask_kinds=("none", "causal", "window", "blocksparse",
              "prefixlm"), ragged=True, gqa=True, cross=True, q_longer=True)


@pytest.mark.filterwarnings("ignore::hypothesis.errors.NonInteractiveExampleWarning")
@pytest.mark.parametrize(("call", "message"), [
    (lambda: lengths(max_len=0).example(), "max_len=0 must be a positive int"),
    (lambda: varlen_lengths(relations=("sideways",)).example(), "relations has \\['sideways'\\]"),
    (lambda: masks(kinds=()).example(), "kinds is empty"),
    (lambda: head_layouts(max_group=-1).example(), "max_group=-1 must be a positive int"),
    (lambda: Space(dtypes=("fp64",), head_dims=(8,), mask_kinds=("none",), ragged=False, gqa=False, cross=False,
                   q_longer=False), "dtypes has \\['fp64'\\]"),
    (lambda: attn_cases(backend="x", space=SPACE, direction="sideways").example(), "direction='sideways'"),
])
def test_bad_arguments_fail_at_once_naming_them(call, message):
    with pytest.raises(InvalidArgument, match=message):
        call()


def test_cases_shrink_to_the_simplest():
    case = find(attn_cases(backend="x", space=SPACE), lambda c: True)
    assert (case.seqlens_q, case.seqlens_k, case.heads_q, case.heads_kv) == ((1,), (1,), 1, 1)
    assert case.mask == Mask.none() and case.softmax_scale is None and case.dtype == "fp32"
    ragged = find(varlen_lengths(), lambda p: len(set(p[0])) > 1)
    assert ragged == ((1, 2), (1, 2))
    gqa = find(head_layouts(), lambda h: h[0] != h[1])
    assert gqa == (2, 1)


@settings(max_examples=200, deadline=None)
@given(max_len=st.integers(1, 300), data=st.data())
def test_lengths_stay_in_range(max_len, data):
    # the interesting lengths (up to 129, and 255-1021 with long=True) must be cut at max_len
    n = data.draw(lengths(max_len=max_len, long=data.draw(st.booleans())))
    assert 1 <= n <= max_len


def test_tile_edges_and_long_lengths_are_drawn():
    seen = set()

    @settings(max_examples=400, deadline=None, database=None)
    @given(n=lengths(max_len=1100, long=True))
    def collect(n):
        seen.add(n)

    collect()
    assert {1, 63, 64, 65, 127, 128, 129} <= seen and seen & {255, 256, 257, 509, 1021}


@settings(max_examples=100, deadline=None)
@given(case=attn_cases(backend="x", space=SPACE))
def test_cases_are_valid_and_replayable(case):
    again, seed = case_from_json(case_json(case, 7))
    assert seed == 7 and again == case and again.mask.id == case.mask.id


@settings(max_examples=100, deadline=None)
@given(case=attn_cases(backend="x", space=Space(dtypes=("fp32",), head_dims=(8,), mask_kinds=("causal",),
                                                  ragged=False, gqa=False, cross=True, q_longer=False)))
def test_spaces_are_respected(case):
    assert not case.ragged and case.heads_q == case.heads_kv
    assert all(q <= k for q, k in zip(case.seqlens_q, case.seqlens_k, strict=True))  # no rows without keys


def test_decode_only_spaces_draw_one_query():
    space = Space(dtypes=("bf16",), head_dims=(64,), mask_kinds=("none",), ragged=True, gqa=True, cross=True,
                  q_longer=False, queries=1)
    case = find(attn_cases(backend="x", space=space), lambda c: c.batch > 1)
    assert set(case.seqlens_q) == {1}


def test_mask_ids_round_trip():
    for m in (Mask.none(), Mask.causal(), Mask.window(3, -1)):
        assert mask_from_id(m.id) == m
    assert mask_from_id("blocksparse4-d25-s3").id == "blocksparse4-d25-s3"
    assert mask_from_id("prefixlm5").id == "prefixlm5"
    for name in ("all-true", "causal-topleft", "doc2-3", "doccausal4-4"):
        assert mask_from_id(name).id == name
    with pytest.raises(ValueError, match="mask id 'doc3x' cannot be rebuilt from its id"):
        mask_from_id("doc3x")


def test_ledger_covers_by_backend_and_predicate():
    entry = KnownFailure("lib-x", "head dim 72", lambda c: c.head_dim_qk == 72, example="{}", reason="upstream bug",
                         link="https://example.org/issue/1")
    c72 = AttnCase.dense(backend="lib-x", shape="s", batch=1, seqlen_q=4, heads_q=1, head_dim=72)
    assert known_failure(c72, [entry]) is entry
    assert known_failure(AttnCase.dense(backend="lib-y", shape="s", batch=1, seqlen_q=4, heads_q=1, head_dim=72),
                         [entry]) is None
    assert known_failure(c72) is None  # the shipped ledger has no entry for lib-x


def test_shipped_ledger_entries_are_complete_and_cover_their_examples():
    from pytest_attn.ledger import LEDGER

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
