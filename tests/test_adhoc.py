"""--attn-case: one problem from the command line (pytest_attn.core.adhoc). Pure."""

from __future__ import annotations

import pytest

from pytest_attn.core.adhoc import AdhocError, parse_case


def test_adhoc_cases():
    v = parse_case("batch=4,seqlen=2048,heads=16,head_dim=128,causal,dtype=bf16")
    c = v.case("sdpa-flash")
    assert (c.batch, c.seqlens_q[0], c.seqlens_k[0], c.heads_q, c.heads_kv, c.head_dim_qk, c.dtype) == (
        4, 2048, 2048, 16, 16, 128, "bf16")
    assert c.mask.kind == "causal" and c.direction == "fwd" and v.shape.name == "adhoc-b4-sq2048-sk2048-h16x16-d128"
    decode = parse_case("seqlen_q=1,seqlen_k=8192,heads=32,kv_heads=8,head_dim=128,causal").case("x")
    assert (decode.seqlens_q, decode.seqlens_k, decode.heads_kv) == ((1,), (8192,), 8)
    ragged = parse_case("varlen=1,7,128,300,heads=32,kv_heads=8,head_dim=128,causal")
    assert ragged.case("x").seqlens_q == (1, 7, 128, 300) and ragged.shape.kind == "varlen"
    win = parse_case("seqlen=64,heads=2,head_dim=32,window=16:4,fwd+bwd,name=my-dit")
    assert win.mask == win.mask.window(16, 4) and win.direction == "fwd+bwd" and win.shape.name == "my-dit"


@pytest.mark.parametrize(("spec", "message"), [
    ("seqlen=64,heads=2,head_dim=32,nheads=4", "unknown field 'nheads'; accepted: batch=N"),
    ("seqlen=64,heads=2", "heads= and head_dim= are required"),
    ("seqlen=sixty,heads=2,head_dim=32", "seqlen='sixty' is not an integer"),
    ("seqlen=64,heads=2,head_dim=32,dtype=fp64", "dtype='fp64' is not one of fp16, bf16, fp32, fp8"),
    ("seqlen=64,heads=6,kv_heads=4,head_dim=32", "kv_heads=4 does not divide heads=6"),
    ("heads=2,head_dim=32", "give seqlen="),
    ("seqlen=64,heads=2,head_dim=32,window=a", "window='a' must be LEFT or LEFT:RIGHT"),
    ("seqlen=64,heads=2,head_dim=32,fast", "'fast' is neither field=value nor a flag"),
    ("varlen=1,7,batch=2,heads=2,head_dim=32", "varlen= gives the lengths"),
    ("seqlen=0,heads=2,head_dim=32", "seqlen=0 must be positive"),
])
def test_bad_adhoc_cases_name_the_field(spec, message):
    with pytest.raises(AdhocError, match=message):
        parse_case(spec)
