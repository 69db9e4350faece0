"""PyTorch ``scaled_dot_product_attention``, one back end per kernel: flash, efficient, cuDNN, math.

Masks: no mask, or causal with ``seqlen_q == seqlen_k``, use SDPA's own flags. SDPA's
``is_causal`` is **top-left** aligned, so bottom-right causal with ``seqlen_q != seqlen_k``,
sliding windows and custom masks are passed as an explicit boolean ``attn_mask`` built once, outside
the timed call. The flash kernel takes no ``attn_mask``: such cases are skipped with that reason.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..masks import dense_mask, effective_mask
from .base import ForwardFn, Unsupported, call_or_unsupported

if TYPE_CHECKING:
    from ..case import AttnCase
    from ..device import DeviceInfo
    from ..inputs import Inputs

_KERNELS = {
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "math": "MATH",
}


def _mask_plan(case: AttnCase) -> str:
    """"none", "is_causal" or "attn_mask": how SDPA expresses this case's mask."""
    mask = effective_mask(case)
    if mask.kind == "none":
        return "none"
    if mask.kind == "causal" and case.seqlens_q == case.seqlens_k:
        return "is_causal"  # top-left == bottom-right when the lengths are equal
    return "attn_mask"


@dataclass(frozen=True)
class SdpaBackend:
    kernel: str  # key of _KERNELS

    layout = "bhsd"
    has_backward = True
    default_enabled = True

    @property
    def name(self) -> str:
        return f"sdpa-{self.kernel}"

    @property
    def description(self) -> str:
        return f"torch.nn.functional.scaled_dot_product_attention with SDPBackend.{_KERNELS[self.kernel]}"

    @property
    def needs_cuda(self) -> bool:
        return self.kernel in ("efficient", "cudnn")  # flash and math also have CPU kernels

    def available(self) -> str | None:
        try:
            from torch.nn.attention import SDPBackend  # noqa: F401
        except ImportError:
            return "this torch has no torch.nn.attention.SDPBackend (needs torch >= 2.3)"
        return None

    def supports(self, case: AttnCase, device: DeviceInfo) -> str | None:
        if case.dtype == "fp8":
            return "SDPA has no fp8 path"
        if case.ragged:
            return "SDPA takes a dense batch; this case has per-sequence lengths (use the varlen back end)"
        if self.kernel == "flash":
            if _mask_plan(case) == "attn_mask":
                why = (
                    "its is_causal is top-left aligned, so bottom-right causal with seqlen_q != seqlen_k"
                    if case.mask.kind == "causal"
                    else f"a {case.mask.kind} mask"
                )
                return f"SDPA's flash kernel takes no attn_mask and {why} needs one"
            if device.is_cuda and case.dtype == "fp32":
                return "SDPA's flash kernel on CUDA takes fp16/bf16 only"
        if self.kernel == "cudnn":
            if case.dtype == "fp32":
                return "SDPA's cuDNN kernel takes fp16/bf16 only"
            if device.compute_capability and device.compute_capability < (8, 0):
                return "SDPA's cuDNN kernel needs sm80 or newer"
        return None

    def workspace_bytes(self, case: AttnCase) -> int:
        mask = 0
        if _mask_plan(case) == "attn_mask":
            mask = case.max_seqlen_q * case.max_seqlen_k  # one bool per pair, shared by the batch
        if self.kernel != "math":
            return mask
        # math materialises scores and probabilities (fp32 softmax) per (batch, head)
        scores = case.batch * case.heads_q * case.max_seqlen_q * case.max_seqlen_k
        factor = 3 if case.direction == "fwd+bwd" else 2
        return mask + scores * (case.elem_bytes + 4) * factor

    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, _KERNELS[self.kernel])
        q, k, v = inputs.q, inputs.k, inputs.v
        plan = _mask_plan(case)
        kwargs: dict[str, Any] = {"scale": case.scale}
        if case.heads_q != case.heads_kv:
            kwargs["enable_gqa"] = True
        if plan == "is_causal":
            kwargs["is_causal"] = True
        elif plan == "attn_mask":
            kwargs["attn_mask"] = dense_mask(case.mask, case.max_seqlen_q, case.max_seqlen_k, q.device)

        def forward() -> Any:
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, **kwargs)

        call_or_unsupported(self.name, forward)
        return forward


SDPA_BACKENDS = tuple(SdpaBackend(k) for k in _KERNELS)
__all__ = ["SDPA_BACKENDS", "SdpaBackend", "Unsupported"]
