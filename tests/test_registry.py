"""The back-end interface and the registry (pytest_attn.backends.base): names, refusals, condensed
PyTorch warnings."""

from __future__ import annotations

import pytest
from factories import CPU, H100, dense

torch = pytest.importorskip("torch")

from pytest_attn.backends import Registry, RegistryError, SdpaBackend, builtin_registry, refusal  # noqa: E402
from pytest_attn.backends.base import explain_refusal  # noqa: E402


def case(backend, sq=8, sk=8, mask=None, *, hq=4, hkv=4, dtype="fp32", direction="fwd", batch=2):
    return dense(backend, sq, sk, mask, hq=hq, hkv=hkv, d=16, dtype=dtype, direction=direction, batch=batch)


def test_builtin_registry():
    reg = builtin_registry()
    assert reg.names() == [
        "sdpa-flash", "sdpa-efficient", "sdpa-cudnn", "sdpa-math", "sdpa-efficient-mask", "flex", "varlen",
        "sdpa-loop", "sdpa-padded", "flash-attn", "flash-attn-varlen", "flash-attn-kvcache",
        "flash-attn-kvcache-split1", "flash-attn-paged", "fa3", "fa3-varlen", "fa3-kvcache", "fa4", "fa4-varlen",
        "fa4-paged",
        "flashinfer-single", "flashinfer-ragged", "flashinfer-paged", "flashinfer-decode-p16", "flashinfer-decode-p256",
        "flashinfer-decode-tc-p16", "flashinfer-sink", "flashinfer-mla", "flashinfer-custom", "flashinfer-packed",
        "flashinfer-bsr",
        "reference",
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


def test_one_answer_to_can_this_back_end_run_here():
    sdpa = SdpaBackend("efficient")
    assert refusal(sdpa, case("sdpa-efficient"), CPU) == "no CUDA device"
    assert refusal(sdpa, case("sdpa-efficient"), H100) is None
    assert refusal(SdpaBackend("math"), case("sdpa-math", dtype="fp8"), CPU) == "SDPA has no fp8 path"

    class NoBackward(SdpaBackend):
        has_backward = False

    assert refusal(NoBackward("math"), case("sdpa-math", direction="fwd+bwd"), CPU) == "sdpa-math has no backward pass"


def test_a_refusal_wrapped_by_a_subprocess_names_the_error_it_wraps():
    """flex on DeepSeek's MLA decode on an H200: torch.compile's worker failed, and the skip said only
    "SubprocException: An exception occurred in a subprocess:". The wrapped error is the message's last line."""
    from pytest_attn.backends.base import Unsupported, library_refusal

    wrapped = ("SubprocException: An exception occurred in a subprocess:\nTraceback (most recent call last):\n"
               '  File "x.py", line 1, in <module>\n'
               "triton.runtime.errors.OutOfResources: out of resource: shared memory, Required: 344064, Hardware limit:"
               " 232448\n")
    with pytest.raises(Unsupported) as raised, library_refusal("flex"):
        raise RuntimeError(wrapped)
    assert str(raised.value) == ("flex refused this case: SubprocException: An exception occurred in a subprocess: ..."
                                 " triton.runtime.errors.OutOfResources: out of resource: shared memory, Required:"
                                 " 344064, Hardware limit: 232448")
    with pytest.raises(Unsupported, match=r"^flex refused this case: no kernel for d 576$"), library_refusal("flex"):
        raise RuntimeError("no kernel for d 576\nmore detail")


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
