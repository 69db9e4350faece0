from __future__ import annotations

import pytest

from pytest_attn.core.catalog import PROFILES, SHAPES, SHAPES_BY_NAME, profile_variants


def test_real_model_shapes():
    h = SHAPES_BY_NAME["hunyuan-video"]
    assert (h.batch, h.seqlen_q, h.heads_q, h.head_dim, h.causal) == (1, 111_856, 24, 128, False)
    llama = SHAPES_BY_NAME["llama3-8b-prefill"]
    assert (llama.heads_q, llama.heads_kv, llama.seqlen_q, llama.causal) == (32, 8, 8192, True)
    qwen = [s for s in SHAPES if s.name.startswith("qwen2.5-7b-decode")]
    assert {s.seqlen_k for s in qwen} >= {64, 32768} and all(s.seqlen_q == 1 and s.heads_kv == 4 for s in qwen)
    assert all(s.source for s in SHAPES)


def test_profiles():
    smoke = profile_variants("smoke")
    assert 3 <= len(smoke) <= 10
    assert any(v.shape.name == "hunyuan-video" for v in profile_variants("default")) and any(v.shape.decode
                                                                                          for v in smoke)
    assert {v.shape.kind for v in smoke} == {"prefill", "decode", "varlen"}
    for kind in ("prefill", "decode", "varlen"):
        assert {v.shape.kind for v in profile_variants("smoke", kind)} == {kind}
    full, default = profile_variants("full"), profile_variants("default")
    assert len(full) > len(default) > len(smoke)
    assert {v.mask.kind for v in full if not v.shape.decode} == {"none", "causal"}
    assert all(v.direction == "fwd" for v in full if v.shape.decode)
    cpu = profile_variants("cpu")
    assert all(v.shape.seqlen_q * v.shape.seqlen_k <= 128 * 256 for v in cpu)
    assert set(PROFILES) == {"smoke", "default", "full", "cpu", "sustained", "models-2026"}
    with pytest.raises(ValueError, match="unknown profile 'huge'"):
        profile_variants("huge")
    with pytest.raises(ValueError, match="unknown suite kind 'x'; choose one of prefill, decode, varlen, masks"):
        profile_variants("smoke", "x")


def test_decode_and_varlen_shapes():
    spec = SHAPES_BY_NAME["qwen2.5-7b-spec4-k4096"]
    assert (spec.seqlen_q, spec.seqlen_k, spec.heads_q, spec.heads_kv, spec.kind) == (4, 4096, 28, 4, "decode")
    b64 = SHAPES_BY_NAME["qwen2.5-7b-decode-b64-k1024"]
    assert (b64.batch, b64.seqlen_q) == (64, 1)
    mixed = SHAPES_BY_NAME["varlen-mixed5"]
    c = mixed.case("varlen", "bf16", mixed.own_mask, "fwd")
    assert c.seqlens_q == c.seqlens_k == (1, 7, 128, 300, 1025) and c.ragged and mixed.kind == "varlen"
    assert {s.kind for s in SHAPES} == {"prefill", "decode", "varlen"}


def test_mask_suite_variants():
    smoke = profile_variants("smoke", "masks")
    ids = {(v.shape.name, v.mask.id) for v in smoke}
    assert ("video-8k", "causal") in ids and ("video-8k", "blocksparse128-d25-s0") in ids
    assert ("hunyuan-video", "all-true") in {(v.shape.name, v.mask.id) for v in profile_variants("default", "masks")}
    assert len(profile_variants("default", "masks")) > len(smoke)
    cpu = profile_variants("cpu", "masks")
    assert {v.mask.kind for v in cpu} == {"custom", "causal", "window"}
    assert all(v.shape.seqlen_q <= 128 for v in cpu)


def test_variant_makes_cases_with_readable_ids():
    v = profile_variants("default")[0]
    assert v.case("sdpa-flash").id == "sdpa-flash-hunyuan-video-bf16-full-fwd"
