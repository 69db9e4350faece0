"""The PyTorch adapters (SDPA per kernel, flex, varlen): supports() reasons word for word, keywords
matched to the installed torch, and CPU correctness against the reference."""

from __future__ import annotations

import pytest
from factories import CPU, H100, dense

torch = pytest.importorskip("torch")

from pytest_attn.backends import SdpaBackend  # noqa: E402
from pytest_attn.backends.torch_flex import mask_mod_for  # noqa: E402
from pytest_attn.backends.torch_varlen import Unsupported, varlen_kwargs  # noqa: E402
from pytest_attn.core.case import AttnCase, Mask  # noqa: E402
from pytest_attn.core.mask_tensors import dense_mask  # noqa: E402
from pytest_attn.engine.inputs import make_inputs  # noqa: E402
from pytest_attn.oracle.reference import reference_attention  # noqa: E402


def case(backend, sq=8, sk=8, mask=None, *, hq=4, hkv=4, dtype="fp32", direction="fwd", batch=2):
    return dense(backend, sq, sk, mask, hq=hq, hkv=hkv, d=16, dtype=dtype, direction=direction, batch=batch)


def test_sdpa_supports_reasons_word_for_word():
    flash = SdpaBackend("flash")
    assert flash.supports(case("sdpa-flash", 4, 8, Mask.causal(), dtype="bf16"), H100) == (
        "SDPA's flash kernel takes no attn_mask and its is_causal is top-left aligned, so bottom-right causal"
        " with seqlen_q != seqlen_k needs one"
    )
    assert flash.supports(case("sdpa-flash", 8, 8, Mask.causal(), dtype="bf16"), H100) is None
    decode = case("sdpa-flash", 1, 64, Mask.causal(), dtype="bf16")
    assert flash.supports(decode, H100) is None  # one query sees every key: no mask needed
    assert flash.supports(case("sdpa-flash", dtype="fp32"), H100) == "SDPA's flash kernel on CUDA takes fp16/bf16 only"
    assert flash.supports(case("sdpa-flash", dtype="fp32"), CPU) is None
    assert SdpaBackend("math").supports(case("sdpa-math", dtype="fp8"), H100) == "SDPA has no fp8 path"
    assert SdpaBackend("cudnn").supports(case("sdpa-cudnn"), H100) == "SDPA's cuDNN kernel takes fp16/bf16 only"
    ragged = AttnCase("sdpa-math", "r", (3, 5), (3, 5), 2, 2, 16, 16)
    assert "per-sequence lengths" in SdpaBackend("math").supports(ragged, CPU)


def test_varlen_keywords_follow_the_installed_signature():
    causal = case("varlen", mask=Mask.causal(), hq=4, hkv=2, dtype="bf16")
    assert varlen_kwargs({"scale", "window_size"}, causal) == {"scale": 0.25, "window_size": (-1, 0)}
    assert varlen_kwargs({"scale", "is_causal"}, causal) == {"scale": 0.25, "is_causal": True}
    assert varlen_kwargs({"scale", "window_size", "enable_gqa"}, causal)["enable_gqa"] is True
    with pytest.raises(Unsupported, match="cannot express a window mask"):
        varlen_kwargs({"scale", "is_causal"}, case("varlen", mask=Mask.window(4, 0)))


@pytest.mark.parametrize("mask", [Mask.causal(), Mask.window(3, 1), Mask.window(-1, 2)])
@pytest.mark.parametrize(("sq", "sk"), [(8, 8), (5, 11), (11, 5)])
def test_flex_mask_mod_matches_the_dense_mask(mask, sq, sk):
    c = case("flex", sq, sk, mask)
    mod = mask_mod_for(c, "cpu")
    q_idx = torch.arange(sq)[:, None].expand(sq, sk)
    kv_idx = torch.arange(sk)[None, :].expand(sq, sk)
    zero = torch.zeros((), dtype=torch.long)
    assert torch.equal(mod(zero, zero, q_idx, kv_idx), dense_mask(mask, sq, sk))


def run_backend(backend, c):
    inputs = make_inputs(c, backend.layout, "cpu", seed=1)
    return inputs, backend.prepare(c, inputs)()


@pytest.mark.parametrize("kernel", ["math", "flash"])
@pytest.mark.parametrize(
    "c_args",
    [dict(), dict(mask=Mask.causal()), dict(hq=8, hkv=2, mask=Mask.causal()), dict(sq=6, sk=9, mask=Mask.causal()),
     dict(mask=Mask.window(2, 0))],
    ids=["full", "causal", "gqa-causal", "cross-causal", "window"],
)
def test_sdpa_on_cpu_matches_the_reference(kernel, c_args):
    backend = SdpaBackend(kernel)
    c = case(f"sdpa-{kernel}", **c_args)
    if backend.supports(c, CPU):
        pytest.skip(backend.supports(c, CPU))
    _, out = run_backend(backend, c)
    ref_inputs = make_inputs(c, "thd", "cpu", seed=1)
    ref = reference_attention(ref_inputs, c, torch.float64).to(torch.float64)
    got = out.transpose(1, 2).reshape(-1, c.heads_q, c.head_dim_v).to(torch.float64)
    assert torch.allclose(got, ref, atol=1e-5), (got - ref).abs().max()
