"""flash-attn adapters (pytest_attn.backends.flash_attn) without the library: supports() reasons, install
hints, and the keywords a call passes (a small fake module computes the right answer)."""

from __future__ import annotations

import sys
import types

import pytest
from factories import A100, H100, T4, dense

torch = pytest.importorskip("torch")

from pytest_attn.backends.flash_attn import FA3, FA4, FlashAttnFunc, FlashAttnKvcache, FlashAttnVarlen  # noqa: E402
from pytest_attn.core import masks  # noqa: E402
from pytest_attn.core.case import AttnCase, KvCache, Mask  # noqa: E402
from pytest_attn.engine.inputs import make_inputs  # noqa: E402
from pytest_attn.oracle.checks import check_rows  # noqa: E402
from pytest_attn.oracle.reference import attention_rows  # noqa: E402


@pytest.fixture
def no_libraries(monkeypatch):
    for name in ("flash_attn", "flash_attn_interface", "flash_attn.cute", "flashinfer"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ModuleNotFoundError


def test_missing_libraries_say_how_to_install(no_libraries):
    assert FlashAttnFunc().available() == (
        "flash-attn is not installed (pip install flash-attn --no-build-isolation)")
    assert "flash-attn 3 (flash_attn_interface) is not installed" in FlashAttnFunc(FA3).available()
    assert FlashAttnVarlen(FA4).available() == (
        "flash-attn 4 (flash_attn.cute) is not installed (pip install flash-attn-4)")


def test_flash_attn_supports_reasons():
    fa = FlashAttnFunc()
    assert fa.supports(dense("flash-attn"), H100) is None
    assert fa.supports(dense("flash-attn", dtype="fp32"), H100) == "flash-attn takes fp16/bf16, not fp32"
    assert fa.supports(dense("flash-attn"), T4) == "flash-attn needs sm80 or newer; this GPU is sm75"
    assert fa.supports(dense("flash-attn", d=192, dv=128), H100) == (
        "flash-attn needs the same head dim for q/k and v (got 192/128)")
    assert fa.supports(dense("flash-attn", d=512), H100) == "flash-attn takes head dims up to 256 (got 512)"
    assert "custom mask 'doc8-8' has no flash-attn form" in fa.supports(
        dense("flash-attn", mask=masks.document((8, 8))), H100)
    assert fa.supports(dense("flash-attn", mask=Mask.window(4, 0)), H100) is None
    ragged = AttnCase("flash-attn-kvcache", "r", (1, 1), (5, 9), 4, 4, 64, 64)
    assert FlashAttnKvcache().supports(ragged, H100) is None  # ragged caches: cache_seqlens
    assert FlashAttnVarlen().supports(ragged, H100) is None
    ragged_q = AttnCase("flash-attn-kvcache", "r", (1, 2), (5, 9), 4, 4, 64, 64)
    assert FlashAttnKvcache().supports(ragged_q, H100) == (
        "flash_attn_with_kvcache takes the same number of queries per request (use flash-attn-varlen)")
    assert FlashAttnKvcache().supports(dense("x", 8, 4), H100) == (
        "flash_attn_with_kvcache needs seqlen_q <= each request's cache length")
    slots = AttnCase("flash-attn-paged", "r", (1, 1), (5, 9), 4, 4, 64, 64, cache=KvCache(16, 1, 4))
    assert "cache_batch_idx is for dense caches" in FlashAttnKvcache(paged=True).supports(slots, H100)
    assert FlashAttnFunc(FA3).supports(dense("fa3"), A100) == (
        "flash-attn 3 (flash_attn_interface) runs on sm90 only; this GPU is sm80")
    assert FlashAttnFunc(FA3).supports(dense("fa3", dtype="fp8", direction="fwd+bwd"), H100) == (
        "flash-attn 3 (flash_attn_interface) has no fp8 backward")
    assert not FlashAttnKvcache().has_backward and FlashAttnVarlen().has_backward
    assert FlashAttnKvcache().only_suites == ("decode",) and FlashAttnFunc().only_suites == ()
    assert [b.name for b in (FlashAttnFunc(FA3), FlashAttnVarlen(FA4))] == ["fa3", "fa4-varlen"]


def _fake_flash_attn(calls):
    """A stand-in flash_attn module whose functions compute the right answer with the reference and
    record how they were called."""
    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1)):
        calls.append({"causal": causal, "window_size": window_size, "softmax_scale": softmax_scale})
        mask = Mask.causal() if causal else Mask.window(*window_size) if window_size != (-1, -1) else Mask.none()
        c = AttnCase.dense(backend="x", shape="s", batch=q.shape[0], seqlen_q=q.shape[1], seqlen_k=k.shape[1],
                           heads_q=q.shape[2], heads_kv=k.shape[2], head_dim=q.shape[3], dtype="fp32", mask=mask)
        return torch.stack([attention_rows(q[i], k[i], v[i], c, None, torch.float32) for i in range(q.shape[0])])

    return types.SimpleNamespace(flash_attn_func=flash_attn_func, __name__="flash_attn")


@pytest.mark.parametrize(("mask", "expected"), [
    (Mask.none(), {"causal": False, "window_size": (-1, -1)}),
    (Mask.causal(), {"causal": True, "window_size": (-1, -1)}),
    (Mask.window(3, 0), {"causal": False, "window_size": (3, 0)}),
], ids=["none", "causal", "window"])
def test_flash_attn_prepare_passes_flags_by_keyword(monkeypatch, mask, expected):
    calls: list[dict] = []
    monkeypatch.setitem(sys.modules, "flash_attn", _fake_flash_attn(calls))
    c = dense("flash-attn", 12, 20, mask, dtype="fp32", d=16, batch=2)
    inputs = make_inputs(c, "bshd", "cpu")
    out = FlashAttnFunc().prepare(c, inputs)()
    assert calls[-1] == {**expected, "softmax_scale": c.scale}
    assert check_rows(c, inputs, out, "bshd").ok  # bottom-right alignment with sq != sk


def _fake_kvcache(calls, *, fault=""):
    """flash_attn_with_kvcache as documented, in PyTorch: new keys written at cache_seqlens (through the
    block table, or the row cache_batch_idx names), then attention over each request's keys, causal
    aligned bottom-right. ``fault`` plants a library bug: "first_seqlen" reads every request with the
    first request's cache length."""

    def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, cache_seqlens=None, cache_batch_idx=None,
                                block_table=None, softmax_scale=None, causal=False, window_size=(-1, -1),
                                num_splits=0):
        calls.append({"paged": block_table is not None, "batch_idx": cache_batch_idx is not None,
                      "append": k is not None, "num_splits": num_splits})
        b, sq = q.shape[:2]
        lens = cache_seqlens.tolist()
        if fault == "first_seqlen":
            lens = [lens[0]] * b

        def slot(i, p):  # where position p of request i lives
            if block_table is not None:
                page = k_cache.shape[1]
                return int(block_table[i, p // page]), p % page
            return int(cache_batch_idx[i]) if cache_batch_idx is not None else i, p

        outs = []
        for i in range(b):
            for j in range(k.shape[1] if k is not None else 0):
                k_cache[slot(i, lens[i] + j)] = k[i, j]
                v_cache[slot(i, lens[i] + j)] = v[i, j]
            n = lens[i] + (k.shape[1] if k is not None else 0)
            keys = torch.stack([k_cache[slot(i, p)] for p in range(n)])
            values = torch.stack([v_cache[slot(i, p)] for p in range(n)])
            one = AttnCase(backend="x", shape="s", seqlens_q=(sq,), seqlens_k=(n,), heads_q=q.shape[2],
                           heads_kv=k_cache.shape[-2], head_dim_qk=q.shape[3], head_dim_v=q.shape[3], dtype="fp32",
                           mask=Mask.causal() if causal else Mask.none(), softmax_scale=softmax_scale)
            outs.append(attention_rows(q[i], keys, values, one, None, torch.float32))
        return torch.stack(outs)

    return types.SimpleNamespace(flash_attn_with_kvcache=flash_attn_with_kvcache, __name__="flash_attn")


SERVING = dict(backend="flash-attn-kvcache", shape="serve", seqlens_q=(1, 1, 1), seqlens_k=(1, 300, 257), heads_q=4,
               heads_kv=2, head_dim_qk=16, head_dim_v=16, dtype="fp32", mask=Mask.causal())


@pytest.mark.parametrize(("backend", "cache", "expected"), [
    (FlashAttnKvcache(), None, {"paged": False, "batch_idx": False, "append": False, "num_splits": 0}),
    (FlashAttnKvcache(num_splits=1), KvCache(320, 1), {"paged": False, "batch_idx": False, "append": True,
                                                       "num_splits": 1}),
    (FlashAttnKvcache(), KvCache(320, 1, 5), {"paged": False, "batch_idx": True, "append": True, "num_splits": 0}),
    (FlashAttnKvcache(paged=True), KvCache(512, 1), {"paged": True, "batch_idx": False, "append": True,
                                                      "num_splits": 0}),
], ids=["full-caches", "append-split1", "shuffled-rows", "paged-append"])
def test_kvcache_passes_ragged_lengths_appends_rows_and_pages(monkeypatch, backend, cache, expected):
    from pytest_attn.oracle.cache import check_cache

    calls: list[dict] = []
    monkeypatch.setitem(sys.modules, "flash_attn", _fake_kvcache(calls))
    case = AttnCase(**{**SERVING, "backend": backend.name}, cache=cache)
    inputs = make_inputs(case, backend.layout, "cpu")
    call = backend.prepare(case, inputs)
    out = call()
    assert calls[-1] == expected
    assert check_rows(case, inputs, out, "thd").ok  # every request against its own keys
    assert check_cache(case, inputs.k, inputs.v, call.cache) is None


def test_a_library_that_ignores_cache_seqlens_past_the_first_request_is_caught(monkeypatch):
    monkeypatch.setitem(sys.modules, "flash_attn", _fake_kvcache([], fault="first_seqlen"))
    case = AttnCase(**SERVING, cache=KvCache(320, 1))
    inputs = make_inputs(case, "thd", "cpu")
    call = FlashAttnKvcache().prepare(case, inputs)
    out = call()
    rows = check_rows(case, inputs, out, "thd")
    assert not rows.ok and rows.worst.startswith(("sequence 1", "sequence 2"))  # the requests after the first
