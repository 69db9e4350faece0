"""FlashInfer adapters (pytest_attn.backends.flashinfer) without the library: supports() reasons, install
hints, and keywords renamed across versions."""

from __future__ import annotations

import sys

import pytest
from factories import H100, dense

from pytest_attn.backends.base import Unsupported
from pytest_attn.backends.flashinfer import FlashInferBsr, FlashInferRagged, FlashInferSingle, fi_kwargs
from pytest_attn.backends.flashinfer_paged import FlashInferDecode
from pytest_attn.core import masks
from pytest_attn.core.case import Mask


@pytest.fixture
def no_libraries(monkeypatch):
    for name in ("flash_attn", "flash_attn_interface", "flash_attn.cute", "flashinfer"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ModuleNotFoundError


def test_missing_library_says_how_to_install(no_libraries):
    assert FlashInferSingle().available() == "FlashInfer is not installed (pip install flashinfer-python)"


def test_flashinfer_supports_reasons():
    single, decode = FlashInferSingle(), FlashInferDecode(16)
    assert single.supports(dense("fi", d=128, mask=Mask.causal()), H100) is None
    assert single.supports(dense("fi", d=32), H100) == (
        "FlashInfer's kernels are built for head dims 64, 128, 256 (got 32/32)")
    assert single.supports(dense("fi", d=128, batch=2), H100) == (
        "single_prefill_with_kv_cache takes one sequence; this case has 2 (use flashinfer-ragged)")
    assert "a custom mask needs flashinfer-custom, -packed, -bsr or -ragged" in single.supports(
        dense("fi", d=128, mask=masks.document((8, 8))), H100)
    assert FlashInferSingle("custom").supports(dense("fi", d=128, mask=masks.document((8, 8))), H100) is None
    assert FlashInferRagged().supports(dense("fi", d=128, mask=Mask.window(3, 2)), H100) == (
        "FlashInfer has no window with a right extent (win3-2)")
    assert decode.supports(dense("fi", 4, 64, d=128, mask=Mask.causal()), H100) == (
        "BatchDecodeWithPagedKVCacheWrapper takes one query per sequence (this case has 4; use flashinfer-paged)")
    assert decode.supports(dense("fi", 1, 64, d=128, mask=Mask.causal()), H100) is None
    assert single.supports(dense("fi", 8, 4, d=128), H100) == (
        "FlashInfer needs seqlen_q <= seqlen_k (bottom-right alignment leaves rows without keys)")
    assert "no width from 64 to 128" in FlashInferBsr().supports(dense("fi", 96, 96, d=128), H100)
    assert single.supports(dense("fi", d=128, dtype="fp8"), H100) == (
        "pytest-attn's FlashInfer adapter runs fp16/bf16, not fp8")
    assert [b.name for b in (decode, FlashInferDecode(16, tensor_cores=True))] == [
        "flashinfer-decode-p16", "flashinfer-decode-tc-p16"]
    assert FlashInferSingle("packed").only_suites == ("masks",)


def test_fi_kwargs_map_renamed_keywords():
    def v02(q, k, v, causal=False, allow_fp16_qk_reduction=False, sm_scale=None):
        return q

    assert fi_kwargs(v02, {"use_fp16_qk_reduction": False, "sm_scale": 0.5}) == {
        "allow_fp16_qk_reduction": False, "sm_scale": 0.5}
    with pytest.raises(Unsupported, match="takes no window_left= argument; a newer flashinfer-python has it"):
        fi_kwargs(v02, {"window_left": 4})
    assert fi_kwargs(v02, {"kv_data_type": "x"}) == {}  # optional: older versions take no kv_data_type

    def plan(indptr, *args, **kwargs):  # FlashInfer 0.7's decode plan: keywords through **kwargs
        return None

    assert fi_kwargs(plan, {"window_left": 4}) == {"window_left": 4}
