"""FA4's attention sinks (``learnable_sink``) without the library: a stand-in ``flash_attn.cute`` that checks
what FA4's interface asserts about the argument (one bf16 logit per query head) and computes with it; the
fuzzer's check (every element against the fp64 oracle) judges what the adapter passes."""

from __future__ import annotations

import dataclasses
import sys
import types

import pytest
from factories import CPU, H100

torch = pytest.importorskip("torch")

from pytest_attn.backends.base import case_refusal  # noqa: E402
from pytest_attn.backends.flash_attn import FA2, FA4, Fa4Paged, FlashAttnFunc  # noqa: E402
from pytest_attn.core.case import AttnCase, Mask  # noqa: E402
from pytest_attn.fuzz.example import run_example  # noqa: E402
from pytest_attn.oracle.reference import Extras, attention_rows  # noqa: E402


def fake_fa4(calls, case_of):
    def flash_attn_func(q, k, v, qv=None, gather_kv_indices=None, softmax_scale=None, causal=False,
                        window_size=(None, None), learnable_sink=None, softcap=0.0, num_splits=1, pack_gqa=None,
                        deterministic=False, return_lse=False):
        if learnable_sink is not None:  # FA4's own checks
            assert learnable_sink.shape == (q.shape[2],), "learnable_sink is one logit per query head"
            assert learnable_sink.dtype == torch.bfloat16, "learnable_sink must be bfloat16"
        calls.append({"sinks": learnable_sink})
        one = dataclasses.replace(case_of(), seqlens_q=(q.shape[1],), seqlens_k=(k.shape[1],),
                                  softmax_scale=softmax_scale, mask=Mask.causal() if causal else Mask.none())
        extras = Extras(sinks=None if learnable_sink is None else learnable_sink.float())
        out = torch.stack([attention_rows(q[b], k[b], v[b], one, None, torch.float64, extras).to(q.dtype)
                           for b in range(q.shape[0])])
        return out, None

    return types.SimpleNamespace(flash_attn_func=flash_attn_func, __name__="flash_attn.cute")


@pytest.fixture
def fa4(monkeypatch):
    state = types.SimpleNamespace(calls=[], case=None)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", fake_fa4(state.calls, lambda: state.case))
    return state


def _case(backend, **more):
    fields = dict(backend=backend, shape="fuzz", seqlens_q=(7,), seqlens_k=(7,), heads_q=4, heads_kv=2,
                  head_dim_qk=16, head_dim_v=16, dtype="fp32", mask=Mask.causal(), sinks=True)
    return AttnCase(**{**fields, **more})


def test_fa4_passes_the_sinks_as_learnable_sink_and_matches_the_oracle(fa4):
    backend = FlashAttnFunc(FA4)
    fa4.case = _case("fa4")
    check = run_example(fa4.case, backend, CPU, seed=9)
    assert check.ok, check.describe(fa4.case)
    assert fa4.calls[-1]["sinks"] is not None and fa4.calls[-1]["sinks"].dtype == torch.bfloat16


def test_fa4_without_the_sinks_is_caught(fa4, monkeypatch):
    """What the check makes of an adapter that forgot the argument: a wrong output, not a pass."""
    fa4.case = _case("fa4")
    dropped = types.SimpleNamespace(**vars(sys.modules["flash_attn.cute"]))
    real = dropped.flash_attn_func
    dropped.flash_attn_func = lambda *a, learnable_sink=None, **kw: real(*a, **kw)
    monkeypatch.setitem(sys.modules, "flash_attn.cute", dropped)
    assert not run_example(fa4.case, FlashAttnFunc(FA4), CPU, seed=9).ok


def test_fa4_takes_sinks_and_fa2_says_it_does_not():
    case = _case("fa4", dtype="bf16")
    assert FlashAttnFunc(FA4).supports(case, H100) is None and FlashAttnFunc(FA4).forms == ("sinks",)
    assert Fa4Paged().forms == ("sinks",)
    assert FlashAttnFunc(FA2).supports(dataclasses.replace(case, backend="flash-attn"), H100) is None
    assert case_refusal(FlashAttnFunc(FA2), dataclasses.replace(case, backend="flash-attn"), H100) == (
        "flash-attn takes no attention sinks (a learnable sink logit per query head in the softmax denominator): it"
        " does not list 'sinks' in its forms")
