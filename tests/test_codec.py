"""The case's JSON form (pytest_attn.core.codec): cases and mask ids round-trip."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings

from pytest_attn.core.case import AttnCase, Mask
from pytest_attn.core.codec import case_from_dict, case_from_json, case_json, case_to_dict, mask_from_id
from pytest_attn.fuzz.strategies import Space, attn_cases

SPACE = Space(dtypes=("fp32", "bf16"), head_dims=(8, 32), mask_kinds=("none", "causal", "window", "blocksparse",
              "prefixlm"), ragged=True, gqa=True, cross=True, q_longer=True)


@settings(max_examples=100, deadline=None)
@given(case=attn_cases(backend="x", space=SPACE))
def test_cases_are_valid_and_replayable(case):
    again, seed = case_from_json(case_json(case, 7))
    assert seed == 7 and again == case and again.mask.id == case.mask.id


def test_mask_ids_round_trip():
    for m in (Mask.none(), Mask.causal(), Mask.window(3, -1)):
        assert mask_from_id(m.id) == m
    assert mask_from_id("blocksparse4-d25-s3").id == "blocksparse4-d25-s3"
    assert mask_from_id("prefixlm5").id == "prefixlm5"
    for name in ("all-true", "causal-topleft", "doc2-3", "doccausal4-4"):
        assert mask_from_id(name).id == name
    with pytest.raises(ValueError, match="mask id 'doc3x' cannot be rebuilt from its id"):
        mask_from_id("doc3x")


def test_a_named_case_keeps_its_shape_and_a_mask_known_by_name_only():
    case = AttnCase("flex", "video-8k", (8,), (8,), 2, 2, 16, 16, mask=Mask.custom("mine", rows_fn=lambda *a: None))
    data = case_to_dict(case)
    assert data["shape"] == "video-8k" and data["mask"] == "mine"
    with pytest.raises(ValueError, match="mask id 'mine' cannot be rebuilt"):
        case_from_dict(data)
    again = case_from_dict(data, strict_mask=False)
    assert again == case and again.id == case.id  # equality and ids hold; the rows are not known here
    with pytest.raises(Exception, match="read back by its name only"):
        again.mask.rows(8, 8, [0])
    assert "shape" not in json.loads(case_json(AttnCase("x", "fuzz", (1,), (1,), 1, 1, 8, 8), 0))
    with pytest.raises(ValueError, match="unknown case field"):
        case_from_dict({**data, "sahpe": "x"})
