"""FlashInfer's paged decode with an fp8 KV cache (sinks refused) and its sink wrapper, without the library: a stand-in
``flashinfer`` whose ``BatchDecodeWithPagedKVCacheWrapper`` takes ``plan()`` and ``run()`` as FlashInfer 0.7.2
documents them (``run(q, pages, k_scale=, v_scale=, sinks=)``), and whose ``BatchAttentionWithAttentionSinkWrapper``
takes them as FlashInfer's own tests call it (``run(q, pages, sink, sm_scale)``); each reads every request's keys
through the page indices it was planned with and computes in float64. The fuzzer's check judges what the adapter
passes."""

from __future__ import annotations

import dataclasses
import sys
import types
from typing import ClassVar

import pytest
from factories import CPU, H100

torch = pytest.importorskip("torch")

from pytest_attn.backends.base import refusal  # noqa: E402
from pytest_attn.backends.flashinfer_paged import FlashInferDecode  # noqa: E402
from pytest_attn.core.case import AttnCase, Mask  # noqa: E402
from pytest_attn.fuzz.example import run_example  # noqa: E402
from pytest_attn.oracle.reference import Extras, attention_rows  # noqa: E402


class Decode:
    """``BatchDecodeWithPagedKVCacheWrapper`` as it takes its arguments; ``forget`` leaves one out on purpose."""

    calls: ClassVar[list] = []
    forget = ""

    def __init__(self, workspace, kv_layout="NHD", use_tensor_cores=False):
        assert kv_layout == "NHD"

    def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
             pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type=torch.float16,
             kv_data_type=None, sm_scale=None):
        self.planned = (indptr.tolist(), indices.tolist(), last_page_len.tolist(), num_qo_heads, page_size)
        self.kv_data_type, self.sm_scale = kv_data_type, sm_scale

    def run(self, q, paged_kv_cache, *args, q_scale=None, k_scale=None, v_scale=None, out=None, lse=None,
            return_lse=False, enable_pdl=None, window_left=None, sinks=None):
        k_pages, v_pages = paged_kv_cache
        assert k_pages.dtype == self.kv_data_type, "the pages hold what plan() was told"
        if sinks is not None:
            assert sinks.shape == (q.shape[1],)
        Decode.calls.append({"sinks": sinks, "k_scale": k_scale, "v_scale": v_scale})
        if self.forget:
            sinks = None if self.forget == "sinks" else sinks
            k_scale = None if self.forget == "k_scale" else k_scale
        indptr, indices, last, heads, page = self.planned
        outs = []
        for b in range(q.shape[0]):
            pages = indices[indptr[b]:indptr[b + 1]]
            n = (len(pages) - 1) * page + last[b]
            keys, values = (t[pages].reshape(-1, *t.shape[2:])[:n] for t in (k_pages, v_pages))
            one = AttnCase(backend="fake", shape="fake", seqlens_q=(1,), seqlens_k=(n,), heads_q=heads,
                           heads_kv=keys.shape[1], head_dim_qk=keys.shape[2], head_dim_v=values.shape[2],
                           dtype="fp32", softmax_scale=self.sm_scale)
            extras = Extras(sinks, k_scale if k_scale is not None else 1.0, v_scale if v_scale is not None else 1.0)
            outs.append(attention_rows(q[b:b + 1], keys, values, one, None, torch.float64, extras).to(q.dtype))
        return torch.cat(outs)


@pytest.fixture
def flashinfer(monkeypatch):
    Decode.calls, Decode.forget = [], ""
    monkeypatch.setitem(sys.modules, "flashinfer", types.SimpleNamespace(BatchDecodeWithPagedKVCacheWrapper=Decode,
                                                                         __version__="0.7.2.post1"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)  # the stand-in runs on the CPU
    return Decode


def _case(**more):
    fields = dict(backend="flashinfer-decode-p16", shape="fuzz", seqlens_q=(1, 1, 1), seqlens_k=(5, 33, 17),
                  heads_q=8, heads_kv=2, head_dim_qk=64, head_dim_v=64, dtype="bf16", mask=Mask.causal())
    return AttnCase(**{**fields, **more})


def test_decode_passes_the_fp8_scales_and_matches_the_oracle(flashinfer):
    case = _case(kv_dtype="fp8")
    check = run_example(case, FlashInferDecode(16), CPU, seed=2)
    assert check.ok, check.describe(case)
    call = flashinfer.calls[-1]
    assert call["sinks"] is None and call["k_scale"] != 1.0 and call["v_scale"] != 1.0


def test_a_kernel_that_drops_the_scale_is_caught(flashinfer):
    flashinfer.forget = "k_scale"
    assert not run_example(_case(kv_dtype="fp8"), FlashInferDecode(16), CPU, seed=2).ok


def test_a_kernel_that_ignores_the_sink_is_caught(flashinfer):
    """What FlashInfer 0.7.2 does on an H200 (docs/gpu-validation.md), here passed the sinks and dropping them: the
    fuzzer's check fails it, which is why the adapter refuses sink cases rather than time them."""
    flashinfer.forget = "sinks"
    decode = FlashInferDecode(16)
    case = _case(sinks=True)
    taking = type("Taking", (FlashInferDecode,), {"forms": ("sinks", "fp8-kv"), "_refuses": lambda self, c: None,
                                                   "_run_kwargs": _sinks_too})
    assert not run_example(case, taking(16), CPU, seed=2).ok
    assert "run(sinks=) is ignored by FlashInfer 0.7.2's JIT kernels on Hopper" in refusal(decode, case, H100) \
        or refusal(decode, case, H100).startswith("FlashInfer is not installed")


def _sinks_too(self, run, case, inputs):
    """The run() keywords with the sink logits passed, as the adapter did before it refused sinks."""
    return {"sinks": inputs.sinks, **FlashInferDecode._run_kwargs(self, run, case, inputs)}


def test_flashinfer_paged_takes_fp8_and_says_what_it_does_not():
    decode = FlashInferDecode(16)
    assert decode.forms == ("fp8-kv",)
    assert decode.supports(_case(kv_dtype="fp8"), H100) is None
    assert "flashinfer-sink and fa4 take sinks" in decode.supports(_case(sinks=True), H100)
    latent = dataclasses.replace(_case(), heads_kv=1, head_dim_qk=576, head_dim_v=512, latent_kv=True)
    assert "FlashInfer's kernels are built for head dims 64, 128, 256 (got 576/512)" in refusal(decode, latent, H100) \
        or refusal(decode, latent, H100).startswith("FlashInfer is not installed")


class Ragged:
    """``BatchPrefillWithRaggedKVCacheWrapper`` as 0.7.2 takes it: ``plan(qo_indptr, kv_indptr, num_qo_heads,
    num_kv_heads, head_dim_qk, head_dim_vo=None, ...)``; it checks v's width against what it was planned for."""

    planned: ClassVar[dict] = {}

    def __init__(self, workspace, kv_layout="NHD"):
        pass

    def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo=None,
             custom_mask=None, packed_custom_mask=None, causal=False, pos_encoding_mode="NONE",
             use_fp16_qk_reduction=False, window_left=-1, logits_soft_cap=None, sm_scale=None, rope_scale=None,
             rope_theta=None, q_data_type="float16", kv_data_type=None, o_data_type=None):
        Ragged.planned.update(qo=qo_indptr.tolist(), kv=kv_indptr.tolist(), dv=head_dim_vo or head_dim_qk,
                              causal=causal, scale=sm_scale)

    def run(self, q, k, v):
        p = Ragged.planned
        assert v.shape[-1] == p["dv"], "v is as wide as plan() was told"
        outs = []
        for b in range(len(p["qo"]) - 1):
            qs, ks = slice(p["qo"][b], p["qo"][b + 1]), slice(p["kv"][b], p["kv"][b + 1])
            one = AttnCase(backend="fake", shape="fake", seqlens_q=(qs.stop - qs.start,),
                           seqlens_k=(ks.stop - ks.start,), heads_q=q.shape[1], heads_kv=k.shape[1],
                           head_dim_qk=q.shape[2], head_dim_v=v.shape[2], dtype="fp32", softmax_scale=p["scale"],
                           mask=Mask.causal() if p["causal"] else Mask.none())
            outs.append(attention_rows(q[qs], k[ks], v[ks], one, None, torch.float64).to(q.dtype))
        return torch.cat(outs)


def test_ragged_prefill_takes_deepseeks_192_128_through_head_dim_vo(monkeypatch):
    from pytest_attn.backends.flashinfer import FlashInferRagged

    monkeypatch.setitem(sys.modules, "flashinfer", types.SimpleNamespace(BatchPrefillWithRaggedKVCacheWrapper=Ragged))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    backend = FlashInferRagged()
    case = AttnCase(backend=backend.name, shape="fuzz", seqlens_q=(5, 9), seqlens_k=(5, 9), heads_q=4, heads_kv=2,
                    head_dim_qk=192, head_dim_v=128, dtype="bf16", mask=Mask.causal())
    assert backend.supports(case, H100) is None
    check = run_example(case, backend, CPU, seed=3)
    assert check.ok, check.describe(case)
    assert Ragged.planned["dv"] == 128
    other = dataclasses.replace(case, head_dim_qk=128, head_dim_v=64)
    assert backend.supports(other, H100) == ("FlashInfer's kernels are built for head dims 64, 128, 256, and"
                                             " (192, 128) here (got 128/64)")


class SinkWrapper:
    """``BatchAttentionWithAttentionSinkWrapper``: the window and dims at construction, a paged prefill ``plan()``,
    ``run(q, pages, sink, sm_scale)``; ``fault`` plants what a wrong sink would be."""

    fault = ""
    built: ClassVar[list] = []

    def __init__(self, workspace, kv_layout="NHD", use_cuda_graph=False, backend="auto", q_data_type=torch.bfloat16,
                 kv_data_type=torch.bfloat16, head_dim_qk=128, head_dim_vo=128, window_left=-1):
        SinkWrapper.built.append({"window_left": window_left, "dims": (head_dim_qk, head_dim_vo)})
        self.window_left = window_left

    def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads, num_kv_heads,
             head_dim_qk, page_size, head_dim_vo=None, custom_mask=None, packed_custom_mask=None, causal=False,
             pos_encoding_mode="NONE", use_fp16_qk_reduction=False, sm_scale=None, window_left=-1,
             logits_soft_cap=None, rope_scale=None, rope_theta=None, q_data_type="float16", kv_data_type=None,
             non_blocking=True):
        assert window_left == self.window_left, "plan() is told the window the module was built for"
        self.planned = (qo_indptr.tolist(), paged_kv_indptr.tolist(), paged_kv_indices.tolist(),
                        paged_kv_last_page_len.tolist(), page_size, causal, window_left)

    def run(self, q, paged_kv_cache, sink, sm_scale):
        assert sink.dtype == torch.float32 and sink.shape == (q.shape[1],)
        sink = {"doubled": sink * 2, "dropped": None}.get(self.fault, sink)
        qo, kv, indices, last, page, causal, left = self.planned
        k_pages, v_pages = paged_kv_cache
        outs = []
        for b in range(len(qo) - 1):
            pages = indices[kv[b]:kv[b + 1]]
            n = (len(pages) - 1) * page + last[b]
            keys, values = (t[pages].reshape(-1, *t.shape[2:])[:n] for t in (k_pages, v_pages))
            mask = Mask.window(left, 0) if left >= 0 else Mask.causal() if causal else Mask.none()
            one = AttnCase(backend="fake", shape="fake", seqlens_q=(qo[b + 1] - qo[b],), seqlens_k=(n,),
                           heads_q=q.shape[1], heads_kv=keys.shape[1], head_dim_qk=keys.shape[2],
                           head_dim_v=values.shape[2], dtype="fp32", softmax_scale=sm_scale, mask=mask)
            outs.append(attention_rows(q[qo[b]:qo[b + 1]], keys, values, one, None, torch.float64,
                                       Extras(sink, 1.0, 1.0)).to(q.dtype))
        return torch.cat(outs)


@pytest.fixture
def sink_wrapper(monkeypatch):
    SinkWrapper.fault, SinkWrapper.built = "", []
    monkeypatch.setitem(sys.modules, "flashinfer", types.SimpleNamespace(
        BatchAttentionWithAttentionSinkWrapper=SinkWrapper, __version__="0.7.2.post1"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda device=None: None)
    return SinkWrapper


@pytest.mark.parametrize("mask", [Mask.causal(), Mask.window(3, 0)], ids=["causal", "window"])
@pytest.mark.parametrize("queries", [(1, 1, 1), (2, 7, 4)], ids=["decode", "prefill"])
def test_sink_wrapper_computes_the_sink_and_its_faults_are_caught(sink_wrapper, mask, queries):
    from pytest_attn.backends.flashinfer_paged import FlashInferSink

    case = _case(backend="flashinfer-sink", sinks=True, mask=mask, seqlens_q=queries)
    backend = FlashInferSink(16)
    assert backend.supports(case, H100) is None
    check = run_example(case, backend, CPU, seed=4)
    assert check.ok, check.describe(case)
    assert sink_wrapper.built[-1] == {"window_left": 3 if mask.kind == "window" else -1, "dims": (64, 64)}
    for fault in ("doubled", "dropped"):
        sink_wrapper.fault = fault
        assert not run_example(case, backend, CPU, seed=4).ok, fault


def test_sink_wrapper_is_fuzzed_on_prefill_and_decode_lengths_with_a_sink_on_each(sink_wrapper):
    """Its refusal of sink-free cases must not read as "decode only": the first GPU fuzz drew decode lengths alone."""
    from pytest_attn.backends.flashinfer_paged import FlashInferSink
    from pytest_attn.fuzz.space import probe_space

    space = probe_space(FlashInferSink(16), H100, "fwd", dtypes=("bf16",), head_dims=(64,))
    assert not isinstance(space, str) and space.sinks_only and space.queries is None
    assert set(dict(space.by_relation)) == {"self", "prefix", "decode", "serving"}


def test_sink_wrapper_takes_sink_cases_only():
    from pytest_attn.backends.base import case_refusal
    from pytest_attn.backends.flashinfer_paged import FlashInferSink

    backend = FlashInferSink(16)
    assert backend.only_suites == ("prefill", "decode")
    assert case_refusal(backend, _case(), H100) == (
        "BatchAttentionWithAttentionSinkWrapper is FlashInfer's call for attention sinks and this case has none"
        " (flashinfer-paged)")
    assert case_refusal(backend, _case(sinks=True, kv_dtype="fp8"), H100) == (
        "flashinfer-sink takes no fp8 (e4m3) KV cache with a per-tensor scale: it does not list 'fp8-kv' in its"
        " forms")
