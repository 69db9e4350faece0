"""flash-attn and FlashInfer adapters without the libraries: supports() reasons, install hints,
keyword handling across versions (small fakes where a signature matters), paged caches."""

from __future__ import annotations

import sys
import types

import pytest

torch = pytest.importorskip("torch")

from pytest_attn import masks  # noqa: E402
from pytest_attn.backends.base import Unsupported  # noqa: E402
from pytest_attn.backends.flash_attn import FA3, FA4, FlashAttnBackend, keyword_args, paged_cache  # noqa: E402
from pytest_attn.backends.flashinfer import FlashInferBackend, fi_kwargs, paged_kv  # noqa: E402
from pytest_attn.case import AttnCase, Mask  # noqa: E402
from pytest_attn.device import DeviceInfo  # noqa: E402
from pytest_attn.inputs import make_inputs  # noqa: E402
from pytest_attn.reference import check_rows  # noqa: E402

H100 = DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", torch_version="2.11", compute_capability=(9, 0))
A100 = DeviceInfo(kind="cuda", name="NVIDIA A100-SXM4-80GB", torch_version="2.11", compute_capability=(8, 0))
T4 = DeviceInfo(kind="cuda", name="Tesla T4", torch_version="2.11", compute_capability=(7, 5))


def case(backend, sq=16, sk=16, mask=Mask.none(), *, hq=4, hkv=4, d=64, dv=None, dtype="bf16", batch=1,
         direction="fwd"):
    return AttnCase.dense(backend=backend, shape="t", batch=batch, seqlen_q=sq, seqlen_k=sk, heads_q=hq,
                          heads_kv=hkv, head_dim=d, head_dim_v=dv, dtype=dtype, mask=mask, direction=direction)


@pytest.fixture
def no_libraries(monkeypatch):
    for name in ("flash_attn", "flash_attn_interface", "flash_attn.cute", "flashinfer"):
        monkeypatch.setitem(sys.modules, name, None)  # import raises ModuleNotFoundError


def test_missing_libraries_say_how_to_install(no_libraries):
    assert FlashAttnBackend("func").available() == (
        "flash-attn is not installed (pip install flash-attn --no-build-isolation)")
    assert "flash-attn 3 (flash_attn_interface) is not installed" in FlashAttnBackend("func", FA3).available()
    assert FlashAttnBackend("varlen", FA4).available() == (
        "flash-attn 4 (flash_attn.cute) is not installed (pip install flash-attn-4)")
    assert FlashInferBackend("single").available() == "FlashInfer is not installed (pip install flashinfer-python)"


def test_flash_attn_supports_reasons():
    fa = FlashAttnBackend("func")
    assert fa.supports(case("flash-attn"), H100) is None
    assert fa.supports(case("flash-attn", dtype="fp32"), H100) == "flash-attn takes fp16/bf16, not fp32"
    assert fa.supports(case("flash-attn"), T4) == "flash-attn needs sm80 or newer; this GPU is sm75"
    assert fa.supports(case("flash-attn", d=192, dv=128), H100) == (
        "flash-attn needs the same head dim for q/k and v (got 192/128)")
    assert fa.supports(case("flash-attn", d=512), H100) == "flash-attn takes head dims up to 256 (got 512)"
    assert "custom mask 'doc8-8' has no flash-attn form" in fa.supports(
        case("flash-attn", mask=masks.document((8, 8))), H100)
    assert fa.supports(case("flash-attn", mask=Mask.window(4, 0)), H100) is None
    ragged = AttnCase("flash-attn-kvcache", "r", (1, 1), (5, 9), 4, 4, 64, 64)
    assert FlashAttnBackend("kvcache").supports(ragged, H100) == (
        "flash_attn_with_kvcache takes a dense batch; this case is ragged (use flash-attn-varlen)")
    assert FlashAttnBackend("varlen").supports(ragged, H100) is None
    assert FlashAttnBackend("kvcache").supports(case("x", 8, 4), H100) == (
        "flash_attn_with_kvcache needs seqlen_q <= the cache length")
    assert FlashAttnBackend("func", FA3).supports(case("fa3"), A100) == (
        "flash-attn 3 (flash_attn_interface) runs on sm90 only; this GPU is sm80")
    assert FlashAttnBackend("func", FA3).supports(case("fa3", dtype="fp8", direction="fwd+bwd"), H100) == (
        "flash-attn 3 (flash_attn_interface) has no fp8 backward")
    assert not FlashAttnBackend("kvcache").has_backward and FlashAttnBackend("varlen").has_backward
    assert FlashAttnBackend("kvcache").only_suites == ("decode",) and FlashAttnBackend("func").only_suites == ()
    assert [b.name for b in (FlashAttnBackend("func", FA3), FlashAttnBackend("varlen", FA4))] == ["fa3", "fa4-varlen"]


def test_flashinfer_supports_reasons():
    single, decode = FlashInferBackend("single"), FlashInferBackend("decode", 16)
    assert single.supports(case("fi", d=128, mask=Mask.causal()), H100) is None
    assert single.supports(case("fi", d=32), H100) == (
        "FlashInfer's kernels are built for head dims 64, 128, 256 (got 32/32)")
    assert single.supports(case("fi", d=128, batch=2), H100) == (
        "single_prefill_with_kv_cache takes one sequence; this case has 2 (use flashinfer-ragged)")
    assert "a custom mask needs flashinfer-custom, -packed, -bsr or -ragged" in single.supports(
        case("fi", d=128, mask=masks.document((8, 8))), H100)
    assert FlashInferBackend("custom").supports(case("fi", d=128, mask=masks.document((8, 8))), H100) is None
    assert FlashInferBackend("ragged").supports(case("fi", d=128, mask=Mask.window(3, 2)), H100) == (
        "FlashInfer has no window with a right extent (win3-2)")
    assert decode.supports(case("fi", 4, 64, d=128, mask=Mask.causal()), H100) == (
        "BatchDecodeWithPagedKVCacheWrapper takes one query per sequence (this case has 4; use flashinfer-paged)")
    assert decode.supports(case("fi", 1, 64, d=128, mask=Mask.causal()), H100) is None
    assert single.supports(case("fi", 8, 4, d=128), H100) == (
        "FlashInfer needs seqlen_q <= seqlen_k (bottom-right alignment leaves rows without keys)")
    assert "no width from 64 to 128" in FlashInferBackend("bsr").supports(case("fi", 96, 96, d=128), H100)
    assert single.supports(case("fi", d=128, dtype="fp8"), H100) == (
        "pytest-attn's FlashInfer adapter runs fp16/bf16, not fp8")
    assert [b.name for b in (decode, FlashInferBackend("decode", 16, tensor_cores=True))] == [
        "flashinfer-decode-p16", "flashinfer-decode-tc-p16"]
    assert FlashInferBackend("packed").only_suites == ("masks",)


def test_keyword_args_follow_the_installed_signature():
    def fa3_like(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1)):  # no dropout_p
        return q

    assert keyword_args(fa3_like, {"softmax_scale": 0.1, "causal": True}, {}) == {"softmax_scale": 0.1,
                                                                                   "causal": True}

    def old(q, k, v, softmax_scale=None, causal=False):  # flash-attn < 2.3: no window_size
        return q

    assert keyword_args(old, {"causal": True, "window_size": (-1, -1)}, {"window_size": (-1, -1)}) == {
        "causal": True}
    with pytest.raises(Unsupported, match="old of this build takes no window_size= argument"):
        keyword_args(old, {"window_size": (4, 0)}, {"window_size": (-1, -1)})


def test_fi_kwargs_map_renamed_keywords():
    def v02(q, k, v, causal=False, allow_fp16_qk_reduction=False, sm_scale=None):
        return q

    assert fi_kwargs(v02, {"use_fp16_qk_reduction": False, "sm_scale": 0.5}) == {
        "allow_fp16_qk_reduction": False, "sm_scale": 0.5}
    with pytest.raises(Unsupported, match="takes no window_left= argument; a newer flashinfer-python has it"):
        fi_kwargs(v02, {"window_left": 4})
    assert fi_kwargs(v02, {"kv_data_type": "x"}, optional=("kv_data_type",)) == {}

    def plan(indptr, *args, **kwargs):  # FlashInfer 0.7's decode plan: keywords through **kwargs
        return None

    assert fi_kwargs(plan, {"window_left": 4}) == {"window_left": 4}


def test_paged_caches_hold_every_key_in_order():
    k = torch.randn(2, 10, 3, 4)
    v = torch.randn(2, 10, 3, 4)
    kp, vp, table = paged_cache(k, v, 4)
    assert kp.shape == (6, 4, 3, 4) and table.shape == (2, 3) and table.dtype == torch.int32
    assert sorted(table.flatten().tolist()) == list(range(6)) and table.flatten().tolist() != list(range(6))
    assert torch.equal(kp[table.long()].reshape(2, 12, 3, 4)[:, :10], k)
    assert torch.equal(vp[table.long()].reshape(2, 12, 3, 4)[:, :10], v)

    seqlens = (5, 1, 9)
    kt, vt = torch.randn(15, 2, 4), torch.randn(15, 2, 4)
    kp, vp, indptr, indices, last = paged_kv(kt, vt, seqlens, 4)
    assert indptr.tolist() == [0, 2, 3, 6] and last.tolist() == [1, 1, 1]
    got = []
    for i, n in enumerate(seqlens):
        pages = indices[indptr[i] : indptr[i + 1]].long()
        got.append(kp[pages].reshape(-1, 2, 4)[:n])
    assert torch.equal(torch.cat(got), kt)


def _fake_flash_attn(calls):
    """A stand-in flash_attn module whose functions compute the right answer with the reference and
    record how they were called."""
    from pytest_attn.reference import attention_rows

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
    c = case("flash-attn", 12, 20, mask, dtype="fp32", d=16, batch=2)
    inputs = make_inputs(c, "bshd", "cpu")
    out = FlashAttnBackend("func").prepare(c, inputs)()
    assert calls[-1] == {**expected, "softmax_scale": c.scale}
    assert check_rows(c, inputs, out, "bshd").ok  # bottom-right alignment with sq != sk
