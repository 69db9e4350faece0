"""Back-end interface, registry, supports() reasons and CPU correctness of the PyTorch adapters."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_attn.backends import Registry, RegistryError, SdpaBackend, builtin_registry  # noqa: E402
from pytest_attn.backends.base import explain_refusal  # noqa: E402
from pytest_attn.backends.torch_flex import mask_mod_for  # noqa: E402
from pytest_attn.backends.torch_varlen import Unsupported, varlen_kwargs  # noqa: E402
from pytest_attn.case import AttnCase, Mask  # noqa: E402
from pytest_attn.device import DeviceInfo  # noqa: E402
from pytest_attn.inputs import make_inputs  # noqa: E402
from pytest_attn.masks import dense_mask  # noqa: E402
from pytest_attn.reference import reference_attention  # noqa: E402

CPU = DeviceInfo(kind="cpu", name="cpu", torch_version=torch.__version__)
H100 = DeviceInfo(kind="cuda", name="NVIDIA H100 80GB HBM3", torch_version="2.11", compute_capability=(9, 0))


def case(backend, sq=8, sk=8, mask=Mask.none(), *, hq=4, hkv=4, dtype="fp32", direction="fwd", batch=2):
    return AttnCase.dense(backend=backend, shape="t", batch=batch, seqlen_q=sq, seqlen_k=sk, heads_q=hq,
                          heads_kv=hkv, head_dim=16, dtype=dtype, mask=mask, direction=direction)


def test_builtin_registry():
    reg = builtin_registry()
    assert reg.names() == [
        "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa-math", "sdpa-efficient-mask", "flex", "varlen",
        "sdpa-loop", "flash-attn", "flash-attn-varlen", "flash-attn-kvcache", "flash-attn-kvcache-split1",
        "flash-attn-paged", "fa3", "fa3-varlen", "fa4", "fa4-varlen", "flashinfer-single", "flashinfer-ragged",
        "flashinfer-paged", "flashinfer-decode-p16", "flashinfer-decode-p256", "flashinfer-decode-tc-p16",
        "flashinfer-custom", "flashinfer-packed", "flashinfer-bsr", "reference",
    ]
    assert "reference" not in reg.default_names()
    with pytest.raises(RegistryError, match="unknown back end 'fa9'; known: sdpa-flash"):
        reg.get("fa9")


def test_registry_rejects_duplicates_and_incomplete_objects():
    reg = Registry([SdpaBackend("math")])
    with pytest.raises(RegistryError, match="'sdpa-math' is registered twice"):
        reg.register(SdpaBackend("math"))

    class Half:
        name = "half"
        layout = "bshd"

    with pytest.raises(RegistryError, match="lacks description, needs_cuda, has_backward"):
        reg.register(Half())


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


def test_explain_refusal_condenses_pytorch_warnings():
    msgs = [
        "Memory efficient kernel not used because: (Triggered internally at sdp_utils.cpp:986.)",
        "For dense input, both fused kernels require query, key and value to have the same num_heads."
        " (Triggered internally at sdp_utils.cpp:1.)",
        "Flash attention kernel not used because: (Triggered internally at x)",
        "Flash attention has been runtime disabled. (Triggered internally at y)",
    ]
    assert explain_refusal(msgs) == [
        "Memory efficient kernel not used because: For dense input, both fused kernels require query, key and"
        " value to have the same num_heads.",
        "Flash attention kernel not used because: Flash attention has been runtime disabled.",
    ]


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


def test_same_seed_same_values_in_every_layout():
    c = case("x", hq=4, hkv=2, direction="fwd+bwd")
    bhsd, bshd, thd = (make_inputs(c, layout, "cpu", seed=7) for layout in ("bhsd", "bshd", "thd"))
    assert bhsd.q.shape == (2, 4, 8, 16) and bhsd.q.is_contiguous()
    assert torch.equal(bhsd.k.transpose(1, 2).reshape(-1, 2, 16), thd.k)
    assert torch.equal(bshd.grad_out.reshape(-1, 4, 16), thd.grad_out)
    assert not torch.equal(make_inputs(c, "thd", "cpu", seed=8).q, thd.q)


@pytest.mark.parametrize("direction", ["fwd", "fwd+bwd"])
def test_injected_slowdown_is_a_fraction_of_the_whole_timed_step(monkeypatch, direction):
    # a first H200 run calibrated the wait on the forward alone: fwd+bwd cases slowed by 1-2 %, not 6 %
    from pytest_attn.backends import slowed

    timed = []
    monkeypatch.setattr(slowed, "_time_once", lambda fn, cuda: timed.append(fn()) or 0.0)
    case = AttnCase.dense(backend="sdpa-math", shape="t", batch=1, seqlen_q=4, heads_q=2, head_dim=8, dtype="fp32",
                          direction=direction)
    inner = builtin_registry().get("sdpa-math")
    inputs = make_inputs(case, inner.layout, torch.device("cpu"), requires_grad=direction == "fwd+bwd", seed=0)
    slowed.SlowedBackend(inner, 0.06).prepare(case, inputs)
    if direction == "fwd":
        assert isinstance(timed[0], torch.Tensor)  # the forward's output
    else:
        grads = timed[0]  # dq, dk, dv
        assert [g.shape for g in grads] == [inputs.q.shape, inputs.k.shape, inputs.v.shape]
