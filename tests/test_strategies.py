"""Hypothesis strategies (pytest_attn.fuzz.strategies): argument checks, shrinking to small readable cases,
spaces respected."""

from __future__ import annotations

import pytest
from hypothesis import find, given, settings
from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from pytest_attn.core.case import Mask
from pytest_attn.fuzz.strategies import Space, attn_cases, head_layouts, lengths, masks, varlen_lengths

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
