"""Capture: each entry point's record (SDPA with every mask kind, flash-attn dense / ragged / paged, FlashInfer
single and batch wrappers, all through fakes with the libraries' documented signatures), folding, call sites,
outputs unchanged, patches restored, nesting refused, unsupported calls kept with their reason."""

from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import pytest_attn
from pytest_attn.capture import CaptureError
from pytest_attn.capture.command import summary
from pytest_attn.capture.mask_summary import band, summarize


def qkv(b=2, h=4, hk=2, sq=8, sk=8, d=16, grad=False):
    g = torch.Generator().manual_seed(0)
    q = torch.randn(b, h, sq, d, generator=g, requires_grad=grad)
    k = torch.randn(b, hk, sk, d, generator=g, requires_grad=grad)
    v = torch.randn(b, hk, sk, d, generator=g, requires_grad=grad)
    return q, k, v


class Attn(nn.Module):
    def forward(self, q, k, v, **kw):
        return F.scaled_dot_product_attention(q, k, v, **kw)


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attn = Attn()

    def forward(self, q, k, v):
        return self.attn(q, k, v, is_causal=True, enable_gqa=True)


class Model(nn.Module):
    def __init__(self, n=3):
        super().__init__()
        self.blocks = nn.ModuleList(Block() for _ in range(n))

    def forward(self, q, k, v):
        return torch.stack([blk(q, k, v) for blk in self.blocks])


def test_sdpa_calls_fold_with_count_sites_and_order_and_outputs_do_not_change():
    model, (q, k, v) = Model(), qkv()
    original, before = F.scaled_dot_product_attention, model(q, k, v)
    with pytest_attn.capture() as cap:
        during = model(q, k, v)
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)  # outside any module, after them: order 1
    assert torch.equal(before, during)
    assert F.scaled_dot_product_attention is original
    first, second = cap.workload.records
    c = first.call
    assert (first.count, first.order, second.count, second.order) == (3, 0, 1, 1)
    assert (c.batch, c.seqlen_q, c.seqlen_k, c.heads, c.kv_heads, c.head_dim, c.dtype) == (2, 8, 8, 4, 2, 16, "fp32")
    assert (c.mask, c.is_causal, c.enable_gqa, c.direction, c.unsupported) == ("causal", True, True, "fwd", "")
    assert first.sites == ("blocks.0.attn", "blocks.1.attn", "blocks.2.attn") and first.site == "blocks.*.attn"
    assert second.sites == ("<no module>",) and second.call.mask == "none"


def test_direction_is_fwd_bwd_when_autograd_records_the_call():
    q, k, v = qkv(grad=True)
    with pytest_attn.capture() as cap:
        F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
        with torch.no_grad():
            F.scaled_dot_product_attention(q, k, v, enable_gqa=True)
    assert [r.call.direction for r in cap.workload.records] == ["fwd+bwd", "fwd"]


def test_patches_are_restored_on_an_exception_and_nesting_is_refused(tmp_path):
    original = F.scaled_dot_product_attention
    with pytest.raises(RuntimeError, match="boom"), pytest_attn.capture():
        assert F.scaled_dot_product_attention is not original
        raise RuntimeError("boom")
    assert F.scaled_dot_product_attention is original
    outer, inner = pytest_attn.capture(tmp_path / "x.json"), pytest_attn.capture()
    with outer, pytest.raises(CaptureError, match=r"x.json\).*do not nest"), inner:
        pass
    assert F.scaled_dot_product_attention is original
    with pytest_attn.capture():  # usable again after both
        pass


def test_the_file_is_written_at_the_end_and_not_after_an_exception(tmp_path):
    q, k, v = qkv(hk=4)
    with pytest_attn.capture(tmp_path / "m.workload.json") as cap:
        F.scaled_dot_product_attention(q, k, v)
    assert (tmp_path / "m.workload.json").is_file() and cap.workload.name == "m"
    with pytest.raises(ValueError), pytest_attn.capture(tmp_path / "n.json"):
        raise ValueError
    assert not (tmp_path / "n.json").exists()


def causal_bool(sq, sk):
    return torch.ones(sq, sk, dtype=torch.bool).tril(sk - sq)


@pytest.mark.parametrize(("mask", "kind", "window"), [
    (torch.ones(6, 6, dtype=torch.bool), "none", None),
    (causal_bool(6, 6), "causal", None),
    (causal_bool(2, 6), "causal", None),  # bottom-right: the plugin's causal
    (causal_bool(6, 6) & ~causal_bool(6, 6).tril(-3), "window", (2, 0)),
    (torch.where(causal_bool(6, 6), 0.0, float("-inf")), "causal", None),  # additive
])
def test_band_masks_are_named_in_the_plugins_terms(mask, kind, window):
    s = summarize(mask, 1, *mask.shape)
    assert (s.kind, s.window, s.reason) == (kind, window, "")
    assert s.density == pytest.approx(float((mask == 0).float().mean() if mask.is_floating_point()
                                            else mask.float().mean()))


def test_top_left_causal_and_gaps_are_no_band():
    assert band(torch.ones(2, 6, dtype=torch.bool).tril()) is None  # top-left with seqlen_q < seqlen_k
    assert band(torch.ones(2, 6, dtype=torch.bool)) == (-1, -1)  # every row sees every key: unbounded both sides
    gap = torch.ones(3, 3, dtype=torch.bool)
    gap[1, 1] = False
    assert band(gap) is None


def test_a_padded_mask_gives_each_sequences_lengths():
    mask = causal_bool(5, 5).repeat(2, 1, 1, 1)
    mask[1, :, :2, :] = False  # sequence 1 left-padded by 2: its first two queries and keys are padding
    mask[1, :, :, :2] = False
    s = summarize(mask, 2, 5, 5)
    assert (s.kind, s.window, s.seqlens_q, s.seqlens_k) == ("padding", (-1, 0), (5, 3), (5, 3))


def test_custom_and_biased_masks_are_recorded_with_their_density_and_reason():
    q, k, v = qkv(hk=4)
    checker = (torch.arange(8)[:, None] + torch.arange(8)[None, :]) % 2 == 0
    alibi = -torch.arange(8.0)[None, :].expand(8, 8).contiguous()
    with pytest_attn.capture() as cap:
        F.scaled_dot_product_attention(q, k, v, attn_mask=checker)
        F.scaled_dot_product_attention(q, k, v, attn_mask=alibi)
    custom, biased = (r.call for r in cap.workload.records)
    assert (custom.mask, custom.density) == ("custom", 0.5) and "no band" in custom.unsupported
    assert biased.mask == "custom" and "bias" in biased.unsupported


def test_calls_the_plugin_cannot_express_are_kept_and_reported(tmp_path):
    q, k, v = qkv(hk=4)
    with pytest_attn.capture() as cap:
        F.scaled_dot_product_attention(q, k, v, dropout_p=0.5)
        F.scaled_dot_product_attention(q[0], k[0], v[0])  # 3-D
        F.scaled_dot_product_attention(q, k[:, :, :4], v[:, :, :4], is_causal=True)  # top-left causal, sq != sk
    reasons = [r.call.unsupported for r in cap.workload.records]
    assert "dropout_p=0.5" in reasons[0] and "3/3/3 dimensions" in reasons[1] and "top-left" in reasons[2]
    lines = summary(cap.workload, tmp_path / "w.json")
    assert sum("not replayable" in line for line in lines) == 3 and "dropout_p=0.5" in lines[1]


# ---- flash-attn, through a fake with its documented signatures (flash_attn/flash_attn_interface.py) --------
def fake_flash_attn() -> types.ModuleType:
    fa = types.ModuleType("flash_attn")

    def flash_attn_func(q, k, v, dropout_p=0.0, softmax_scale=None, causal=False, window_size=(-1, -1),
                        softcap=0.0, alibi_slopes=None, deterministic=False, return_attn_probs=False):
        return q * 2

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, dropout_p=0.0,
                               softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                               alibi_slopes=None, deterministic=False, return_attn_probs=False, block_table=None):
        return q * 2

    def flash_attn_with_kvcache(q, k_cache, v_cache, k=None, v=None, rotary_cos=None, rotary_sin=None,
                                cache_seqlens=None, cache_batch_idx=None, cache_leftpad=None, block_table=None,
                                softmax_scale=None, causal=False, window_size=(-1, -1), softcap=0.0,
                                rotary_interleaved=True, alibi_slopes=None, num_splits=0, return_softmax_lse=False):
        return q * 2

    fa.flash_attn_func, fa.flash_attn_varlen_func = flash_attn_func, flash_attn_varlen_func
    fa.flash_attn_with_kvcache = flash_attn_with_kvcache
    return fa


def test_flash_attn_dense_ragged_and_paged_calls(monkeypatch):
    fa = fake_flash_attn()
    monkeypatch.setitem(sys.modules, "flash_attn", fa)
    t = torch.zeros
    cu = torch.tensor([0, 3, 10, 30], dtype=torch.int32)
    with pytest_attn.capture() as cap:
        out = fa.flash_attn_func(t(2, 64, 8, 32), t(2, 64, 2, 32), t(2, 64, 2, 32), causal=True, window_size=(16, 0))
        fa.flash_attn_varlen_func(t(30, 8, 32), t(30, 2, 32), t(30, 2, 32), cu, cu, 20, 20, causal=True)
        fa.flash_attn_with_kvcache(t(3, 1, 8, 32), t(10, 16, 2, 32), t(10, 16, 2, 32), k=t(3, 1, 2, 32),
                                   v=t(3, 1, 2, 32), cache_seqlens=torch.tensor([5, 40, 17]),
                                   block_table=torch.zeros(3, 4, dtype=torch.int32), causal=True)
        fa.flash_attn_func(t(2, 64, 8, 32), t(2, 64, 2, 32), t(2, 64, 2, 32), 0.1)
    assert out.shape == (2, 64, 8, 32)  # the library's own output
    dense, ragged, paged, dropout = (r.call for r in cap.workload.records)
    assert (dense.api, dense.mask, dense.window, dense.heads, dense.kv_heads) == ("flash_attn_func", "window",
                                                                                   (16, 0), 8, 2)
    assert (ragged.seqlens_q, ragged.seqlens_k, ragged.mask, ragged.batch) == ((3, 7, 20), (3, 7, 20), "causal", 3)
    assert (paged.kv_cache, paged.page_size, paged.append, paged.seqlens_k, paged.seqlen_q) == (True, 16, 1,
                                                                                                (6, 41, 18), 1)
    assert "dropout_p=0.1" in dropout.unsupported
    assert fa.flash_attn_func.__name__ == "flash_attn_func" and not hasattr(fa.flash_attn_func, "__wrapped__")


# ---- FlashInfer, through a fake with its documented signatures (docs.flashinfer.ai: prefill, decode) -------
def fake_flashinfer() -> types.ModuleType:
    fi = types.ModuleType("flashinfer")

    def single_prefill_with_kv_cache(q, k, v, custom_mask=None, packed_custom_mask=None, causal=False,
                                     kv_layout="NHD", pos_encoding_mode="NONE", use_fp16_qk_reduction=False,
                                     sm_scale=None, window_left=-1, logits_soft_cap=None, rope_scale=None,
                                     rope_theta=None):
        return q

    class BatchDecodeWithPagedKVCacheWrapper:
        def __init__(self, workspace, kv_layout="NHD"):
            self.runs = 0

        def plan(self, indptr, indices, last_page_len, num_qo_heads, num_kv_heads, head_dim, page_size,
                 pos_encoding_mode="NONE", window_left=-1, logits_soft_cap=None, q_data_type="float16",
                 kv_data_type=None, data_type=None, sm_scale=None):
            pass

        def run(self, q, paged_kv_cache):
            self.runs += 1
            return q

    class BatchPrefillWithRaggedKVCacheWrapper:
        def plan(self, qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk, head_dim_vo=None,
                 custom_mask=None, packed_custom_mask=None, causal=False, pos_encoding_mode="NONE",
                 use_fp16_qk_reduction=False, window_left=-1, logits_soft_cap=None, sm_scale=None,
                 rope_scale=None, rope_theta=None, q_data_type="float16", kv_data_type=None):
            pass

        def run(self, q, k, v):
            return q

    fi.single_prefill_with_kv_cache = single_prefill_with_kv_cache
    fi.BatchDecodeWithPagedKVCacheWrapper = BatchDecodeWithPagedKVCacheWrapper
    fi.BatchPrefillWithRaggedKVCacheWrapper = BatchPrefillWithRaggedKVCacheWrapper
    return fi


def test_flashinfer_single_calls_and_each_run_of_a_plan(monkeypatch):
    fi = fake_flashinfer()
    monkeypatch.setitem(sys.modules, "flashinfer", fi)
    t = torch.zeros
    plain_plan = fi.BatchDecodeWithPagedKVCacheWrapper.plan
    with pytest_attn.capture() as cap:
        fi.single_prefill_with_kv_cache(t(6, 8, 64, dtype=torch.bfloat16), t(6, 2, 64), t(6, 2, 64),
                                        custom_mask=causal_bool(6, 6))
        decode = fi.BatchDecodeWithPagedKVCacheWrapper(None)
        decode.plan(torch.tensor([0, 2, 5]), torch.arange(5), torch.tensor([3, 16]), 32, 8, 128, 16,
                    q_data_type=torch.bfloat16)
        for _ in range(3):
            decode.run(None, None)
        ragged = fi.BatchPrefillWithRaggedKVCacheWrapper()
        ragged.plan(torch.tensor([0, 4, 10]), torch.tensor([0, 4, 10]), 8, 8, 64, causal=True, logits_soft_cap=30.0)
        ragged.run(None, None, None)
    assert fi.BatchDecodeWithPagedKVCacheWrapper.plan is plain_plan and decode.runs == 3
    single, paged, rag = cap.workload.records
    assert (single.call.mask, single.call.dtype, single.call.kv_heads, single.count) == ("causal", "bf16", 2, 1)
    assert (paged.count, paged.call.seqlens_k, paged.call.page_size, paged.call.seqlen_q) == (3, (19, 48), 16, 1)
    assert (paged.call.heads, paged.call.kv_heads, paged.call.head_dim, paged.call.dtype) == (32, 8, 128, "bf16")
    assert rag.call.seqlens_q == (4, 6) and "logits_soft_cap=30.0" in rag.call.unsupported


def test_a_library_missing_here_is_not_patched(monkeypatch):
    monkeypatch.setitem(sys.modules, "flash_attn", None)  # import flash_attn raises ImportError here
    with pytest_attn.capture() as cap:
        pass
    assert cap.patched == ["torch.nn.functional.scaled_dot_product_attention"]


def test_fa4_cute_varlen_over_a_paged_cache_and_its_unsupported_extras(monkeypatch):
    """FA4's flash_attn.cute signature (flash_attn/cute/interface.py): optional cu_seqlens, seqused_k, page_table,
    window sides spelled None, learnable_sink."""
    cute = types.ModuleType("flash_attn.cute")

    def flash_attn_varlen_func(q, k, v, cu_seqlens_q=None, cu_seqlens_k=None, max_seqlen_q=None, max_seqlen_k=None,
                               seqused_q=None, seqused_k=None, page_table=None, softmax_scale=None, causal=False,
                               window_size=(None, None), learnable_sink=None, softcap=0.0, num_splits=1,
                               pack_gqa=None, deterministic=False, score_mod=None, aux_tensors=None):
        return q

    cute.flash_attn_varlen_func = flash_attn_varlen_func
    monkeypatch.setitem(sys.modules, "flash_attn.cute", cute)
    t = torch.zeros
    with pytest_attn.capture() as cap:
        cute.flash_attn_varlen_func(t(3, 1, 8, 128, dtype=torch.bfloat16), t(50, 64, 2, 128), t(50, 64, 2, 128),
                                    seqused_k=torch.tensor([100, 7, 64], dtype=torch.int32),
                                    page_table=torch.zeros(3, 2, dtype=torch.int32), causal=True)
        cute.flash_attn_varlen_func(t(2, 16, 8, 128, dtype=torch.bfloat16), t(2, 16, 2, 128), t(2, 16, 2, 128),
                                    window_size=(4, None), learnable_sink=t(8))
    paged, sink = (r.call for r in cap.workload.records)
    assert (paged.api, paged.batch, paged.seqlen_q, paged.seqlens_k, paged.page_size, paged.kv_heads) == (
        "fa4.flash_attn_varlen_func", 3, 1, (100, 7, 64), 64, 2)
    assert (paged.mask, paged.dtype, paged.unsupported) == ("causal", "bf16", "")
    assert (sink.mask, sink.window, sink.seqlen_k) == ("window", (4, -1), 16) and "sinks" in sink.unsupported


def test_one_mask_handed_to_every_layer_is_read_once_and_a_changed_one_again():
    q, k, v = qkv(hk=4)
    mask = causal_bool(8, 8)
    with pytest_attn.capture() as cap:
        for _ in range(4):
            F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
        assert cap.masks.read == 1
        mask[:, :2] = False  # changed in place (its version moved on): now the first two keys are padding
        F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    assert cap.masks.read == 2
    assert [(r.call.mask, r.count) for r in cap.workload.records] == [("causal", 4), ("padding", 1)]


def test_flashinfer_paged_prefill_plan_and_single_decode(monkeypatch):
    fi = types.ModuleType("flashinfer")

    def single_decode_with_kv_cache(q, k, v, kv_layout="NHD", pos_encoding_mode="NONE", use_tensor_cores=False,
                                    q_scale=None, k_scale=None, v_scale=None, window_left=-1, logits_soft_cap=None,
                                    sm_scale=None, rope_scale=None, rope_theta=None):
        return q

    class BatchPrefillWithPagedKVCacheWrapper:
        def plan(self, qo_indptr, paged_kv_indptr, paged_kv_indices, paged_kv_last_page_len, num_qo_heads,
                 num_kv_heads, head_dim_qk, page_size, head_dim_vo=None, custom_mask=None, packed_custom_mask=None,
                 causal=False, pos_encoding_mode="NONE", use_fp16_qk_reduction=False, sm_scale=None, window_left=-1,
                 logits_soft_cap=None, rope_scale=None, rope_theta=None, q_data_type="float16", kv_data_type=None):
            pass

        def run(self, q, paged_kv_cache):
            return q

    fi.single_decode_with_kv_cache = single_decode_with_kv_cache
    fi.BatchPrefillWithPagedKVCacheWrapper = BatchPrefillWithPagedKVCacheWrapper
    monkeypatch.setitem(sys.modules, "flashinfer", fi)
    t = torch.zeros
    with pytest_attn.capture() as cap:
        fi.single_decode_with_kv_cache(t(32, 128, dtype=torch.float16), t(8, 300, 128), t(8, 300, 128),
                                       kv_layout="HND", window_left=64)
        wrapper = fi.BatchPrefillWithPagedKVCacheWrapper()
        wrapper.plan(torch.tensor([0, 4, 8]), torch.tensor([0, 1, 3]), torch.arange(3), torch.tensor([9, 2]), 32, 8,
                     128, 16, causal=True, q_data_type="bfloat16")
        for _ in range(2):
            wrapper.run(None, None)
    decode, prefill = (r.call for r in cap.workload.records)
    assert (decode.seqlen_q, decode.seqlen_k, decode.heads, decode.kv_heads, decode.dtype) == (1, 300, 32, 8, "fp16")
    assert (decode.mask, decode.window, decode.kv_cache) == ("window", (64, -1), True)
    assert (prefill.seqlen_q, prefill.seqlens_k, prefill.page_size, prefill.mask, prefill.dtype) == (
        4, (9, 18), 16, "causal", "bf16")
    assert cap.workload.records[1].count == 2
