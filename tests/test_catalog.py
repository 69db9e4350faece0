from __future__ import annotations

import pytest

from pytest_attn.catalog import PROFILES, SHAPES, SHAPES_BY_NAME, profile_variants


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
    assert 3 <= len(smoke) <= 6
    assert any(v.shape.name == "hunyuan-video" for v in smoke) and any(v.shape.decode for v in smoke)
    full, default = profile_variants("full"), profile_variants("default")
    assert len(full) > len(default) > len(smoke)
    assert {v.mask.kind for v in full if not v.shape.decode} == {"none", "causal"}
    assert all(v.direction == "fwd" for v in full if v.shape.decode)
    cpu = profile_variants("cpu")
    assert all(v.shape.seqlen_q * v.shape.seqlen_k <= 128 * 256 for v in cpu)
    assert set(PROFILES) == {"smoke", "default", "full", "cpu"}
    with pytest.raises(ValueError, match="unknown profile 'huge'"):
        profile_variants("huge")


def test_variant_makes_cases_with_readable_ids():
    v = profile_variants("smoke")[0]
    assert v.case("sdpa-flash").id == "sdpa-flash-hunyuan-video-bf16-full-fwd"
