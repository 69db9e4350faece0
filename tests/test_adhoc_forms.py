"""--attn-case with the forms beyond plain attention: unequal head dims, sinks, absorbed MLA, an fp8 KV cache,
an explicit softmax scale; each case's own checks said with the spec. Pure."""

from __future__ import annotations

import re

import pytest

from pytest_attn.core.adhoc import AdhocError, parse_case


def test_deepseek_mla_decode_from_the_command_line():
    v = parse_case("batch=64,seqlen_q=1,seqlen_k=4096,heads=128,kv_heads=1,head_dim=576,head_dim_v=512,latent,"
                   "scale=0.0722")
    c = v.case("sdpa-math")
    assert (c.head_dim_qk, c.head_dim_v, c.heads_kv, c.latent_kv, c.softmax_scale) == (576, 512, 1, True, 0.0722)
    assert v.shape.kind == "decode"


def test_unequal_dims_sinks_and_an_fp8_cache():
    c = parse_case("seqlen=4096,heads=128,head_dim=192,head_dim_v=128,causal").case("fa3")
    assert (c.head_dim_qk, c.head_dim_v) == (192, 128)
    c = parse_case("seqlen=4096,heads=64,kv_heads=8,head_dim=64,window=127,sinks").case("fa4")
    assert c.sinks and c.mask.bounds == (127, 0)
    c = parse_case("batch=16,seqlen_q=1,seqlen_k=4096,heads=32,kv_heads=8,head_dim=128,kv_dtype=fp8").case("x")
    assert c.kv_dtype == "fp8" and c.dtype == "bf16"


@pytest.mark.parametrize(("spec", "message"), [
    ("seqlen=8,heads=2,head_dim=8,sinks,fwd+bwd", "sinks: a forward only"),
    ("seqlen=8,heads=2,head_dim=8,head_dim_v=8,latent", "the key needs the rope columns"),
    ("seqlen=8,heads=2,head_dim=8,kv_dtype=int4", "kv_dtype='int4' is not one of fp8"),
    ("seqlen=8,heads=2,head_dim=8,scale=big", "scale='big' is not a number"),
    ("seqlen=8,heads=2,head_dim=8,scale=-1", "softmax_scale=-1.0 must be positive"),
])
def test_a_bad_form_names_the_spec_and_why(spec, message):
    with pytest.raises(AdhocError, match=f"--attn-case {re.escape(repr(spec))}.*{re.escape(message)}"):
        parse_case(spec)
