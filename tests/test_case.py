from __future__ import annotations

import pytest

from pytest_attn.core.case import AttnCase, CaseError, Mask


def dense(**kw):
    args = dict(backend="sdpa-flash", shape="hunyuan-video", batch=1, seqlen_q=111_856, heads_q=24, head_dim=128)
    args.update(kw)
    return AttnCase.dense(**args)


def test_readable_id_and_group():
    case = dense(dtype="bf16")
    assert case.id == "sdpa-flash-hunyuan-video-bf16-full-fwd"
    assert case.group == "hunyuan-video-bf16-full-fwd"
    assert dense(mask=Mask.causal(), direction="fwd+bwd").id == "sdpa-flash-hunyuan-video-bf16-causal-fwdbwd"
    assert dense(mask=Mask.window(256, 0)).id.endswith("-win256-0-fwd")


def test_dense_batch_and_derived_facts():
    case = dense(batch=3, seqlen_q=5, seqlen_k=7, heads_q=8, heads_kv=2, head_dim=64, head_dim_v=32)
    assert case.seqlens_q == (5, 5, 5) and case.seqlens_k == (7, 7, 7)
    assert (case.batch, case.total_q, case.total_k, case.max_seqlen_k) == (3, 15, 21, 7)
    assert not case.ragged
    assert case.scale == pytest.approx(64**-0.5)
    assert "8q/2kv heads" in case.describe() and "d=64/32" in case.describe()


def test_ragged_batch():
    case = AttnCase("varlen", "docs", (3, 9), (3, 9), 4, 4, 32, 32)
    assert case.ragged and case.batch == 2
    assert "varlen q=[3, 9]" in case.describe()


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(heads_q=8, heads_kv=3), "heads_kv=3 does not divide heads_q=8"),
        (dict(head_dim=0), "head_dim_qk=0 must be a positive int"),
        (dict(head_dim=64, head_dim_v=-1), "head_dim_v=-1 must be a positive int"),
        (dict(heads_q=0), "heads_q=0 must be a positive int"),
        (dict(dtype="fp64"), "dtype='fp64' is not one of"),
        (dict(direction="bwd"), "direction='bwd' is not one of"),
        (dict(seqlen_q=-4), "seqlens_q[0]=-4 is negative"),
        (dict(seqlen_k=0), "seqlens_k[0]=0"),
        (dict(batch=0), "batch=0 must be a positive int"),
        (dict(backend="sdpa flash"), "backend='sdpa flash'"),
    ],
)
def test_invalid_cases_name_the_field(kwargs, message):
    with pytest.raises(CaseError) as info:
        dense(**kwargs)
    assert message in str(info.value)


def test_lengths_must_pair_up():
    with pytest.raises(CaseError, match="seqlens_q has 2 sequences but seqlens_k has 1"):
        AttnCase("varlen", "x", (3, 4), (3,), 4, 4, 32, 32)


def test_mask_validation():
    with pytest.raises(CaseError, match=r"mask.window_left=-2 must be an int >= -1"):
        Mask.window(-2, 0)
    with pytest.raises(CaseError, match="custom mask needs a name"):
        Mask("custom")
    with pytest.raises(CaseError, match=r"mask\.kind='diag'"):
        Mask("diag")


def test_cases_are_frozen_and_hashable():
    case = dense()
    with pytest.raises(AttributeError):
        case.dtype = "fp16"  # type: ignore[misc]
    assert len({case, dense()}) == 1


def test_a_long_ragged_batch_is_described_by_its_ends_and_totals():
    many = AttnCase("varlen", "skewed", tuple(range(1, 33)), tuple(range(1, 33)), 4, 2, 32, 32)
    text = many.describe()
    assert text.startswith("varlen q=[1, 2, 3, 4, ..., 31, 32] (32 sequences, 528 tokens) k=[1, 2, 3, 4, ..., 31, 32]")
    few = AttnCase("varlen", "mixed", (1, 7, 33), (1, 7, 33), 4, 2, 32, 32)
    assert few.describe().startswith("varlen q=[1, 7, 33] k=[1, 7, 33]")
