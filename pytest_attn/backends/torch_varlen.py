"""PyTorch ``torch.nn.attention.varlen.varlen_attn`` (torch >= 2.9): packed tokens + cu_seqlens.

Its signature changed between releases: torch 2.9 took ``is_causal=``; 2.10+ take
``window_size=(left, right)`` (causal is ``(-1, 0)``); newer ones add ``enable_gqa=``. The
installed signature is inspected, never assumed. Alignment is bottom-right (flash-attn kernels).
"""

from __future__ import annotations

import inspect
from typing import Any

from ..core.case import AttnCase
from ..core.device import DeviceInfo
from ..core.layouts import Inputs
from ..core.masks import effective_mask
from .base import ForwardFn, Unsupported, call_or_unsupported


def varlen_kwargs(params: set[str], case: AttnCase) -> dict[str, Any]:
    """Keyword arguments for the installed ``varlen_attn``, given its parameter names."""
    mask = effective_mask(case)
    kwargs: dict[str, Any] = {}
    if "scale" in params:
        kwargs["scale"] = case.scale
    elif case.softmax_scale is not None:
        raise Unsupported("this torch's varlen_attn takes no scale argument")
    if case.heads_q != case.heads_kv and "enable_gqa" in params:
        kwargs["enable_gqa"] = True
    if mask.kind == "custom":
        raise Unsupported("varlen_attn takes no custom mask")
    if mask.kind in ("causal", "window"):
        if "window_size" in params:
            kwargs["window_size"] = (mask.window_left, mask.window_right)
        elif mask.kind == "causal" and "is_causal" in params:
            kwargs["is_causal"] = True
        else:
            raise Unsupported(f"this torch's varlen_attn cannot express a {mask.kind} mask")
    return kwargs


class VarlenBackend:
    name = "varlen"
    description = "torch.nn.attention.varlen.varlen_attn on packed (total, heads, dim) tokens"
    layout = "thd"
    needs_cuda = True
    has_backward = True
    default_enabled = True
    distribution: str | None = None  # PyTorch's own
    empty_rows = "zero"  # flash-attn kernels underneath

    def available(self) -> str | None:
        try:
            from torch.nn.attention.varlen import varlen_attn  # noqa: F401
        except ImportError:
            return "this torch has no torch.nn.attention.varlen (needs torch >= 2.9)"
        return None

    def supports(self, case: AttnCase, device: DeviceInfo) -> str | None:
        if case.dtype not in ("fp16", "bf16"):
            return f"varlen_attn takes fp16/bf16, not {case.dtype}"
        return None

    def workspace_bytes(self, case: AttnCase) -> int:
        return 0

    def expression(self, case: AttnCase) -> str:
        mask = effective_mask(case)
        return "no mask" if mask.kind == "none" else f"window_size=({mask.window_left}, {mask.window_right})"

    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn:
        from torch.nn.attention.varlen import varlen_attn

        kwargs = varlen_kwargs(set(inspect.signature(varlen_attn).parameters), case)
        q, k, v = inputs.q, inputs.k, inputs.v
        cu_q, cu_k = inputs.cu_seqlens_q, inputs.cu_seqlens_k
        assert cu_q is not None and cu_k is not None, "thd inputs carry cu_seqlens"
        max_q, max_k = case.max_seqlen_q, case.max_seqlen_k

        def forward() -> Any:
            return varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, **kwargs)

        call_or_unsupported(self.name, forward)
        return forward
