"""PyTorch ``scaled_dot_product_attention``, one back end per kernel: flash, efficient, cuDNN, math.

Masks: no mask, or causal with ``seqlen_q == seqlen_k``, use SDPA's own flags. SDPA's
``is_causal`` is **top-left** aligned, so bottom-right causal with ``seqlen_q != seqlen_k``,
sliding windows and custom masks are passed as an explicit boolean ``attn_mask`` built once, outside
the timed call. The flash kernel takes no ``attn_mask``: such cases are skipped with that reason.

Sinks (a sink logit per query head): one more key, all zeros (its score is 0), whose value is zeros and
whose ``attn_mask`` bias is the head's sink logit -- ``exp(sink_h)`` joins every row's denominator and adds
nothing to its numerator. A float ``attn_mask`` carries it, so the math and efficient kernels take sinks and
the flash kernel does not. An fp8 KV cache has no SDPA path.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.case import AttnCase
from ..core.device import DeviceInfo
from ..core.layouts import Inputs, sequence
from ..core.mask_tensors import dense_mask
from ..core.masks import effective_mask
from .base import ForwardFn, Unsupported, call_or_unsupported

_KERNELS = {
    "flash": "FLASH_ATTENTION",
    "efficient": "EFFICIENT_ATTENTION",
    "cudnn": "CUDNN_ATTENTION",
    "math": "MATH",
}


def _mask_plan(case: AttnCase, force_mask: bool = False) -> str:
    """"none", "is_causal" or "attn_mask": how SDPA expresses this case's mask."""
    if force_mask or case.sinks:
        return "attn_mask"
    mask = effective_mask(case)
    if mask.kind == "none":
        return "none"
    if mask.kind == "causal" and case.seqlens_q == case.seqlens_k:
        return "is_causal"  # top-left == bottom-right when the lengths are equal
    return "attn_mask"


#: The memory-efficient kernel's row offset into an attn_mask is 32-bit unsigned: past this many elements of one
#: (batch, head) slice it wraps (pytorch/pytorch#187227; 80,000 tokens: rows from 53,687 wrong by up to 1.4 on an
#: H100, scripts/probe_efficient_mask.py)
MASK_OFFSET_WRAPS = 2**32

#: SDPA kernels that take a float attn_mask, and so sinks (:func:`with_sink_column`)
SINK_KERNELS = ("math", "efficient")
NO_SINKS = ("SDPA's flash kernel takes no attn_mask, and a sink logit needs one (one more key, biased by the"
            " sink)")


def with_sink_column(case: AttnCase, q: Any, k: Any, v: Any, sinks: Any, seqlen_q: int, seqlen_k: int) -> tuple[
        Any, Any, Any]:
    """``(k, v, attn_mask)`` for SDPA (``bhsd``) with the sink as one more key: a zero key (score 0) with a
    zero value and the head's sink logit as its bias; the case's mask hides the other keys (-inf)."""
    import torch

    bias = torch.zeros((case.heads_q, seqlen_q, seqlen_k + 1), dtype=q.dtype, device=q.device)
    if case.mask.kind != "none":
        bias[:, :, :seqlen_k].masked_fill_(~dense_mask(case.mask, seqlen_q, seqlen_k, q.device), float("-inf"))
    bias[:, :, seqlen_k] = sinks.to(device=q.device, dtype=q.dtype)[:, None]
    zero_k = k.new_zeros((*k.shape[:-2], 1, k.shape[-1]))
    zero_v = v.new_zeros((*v.shape[:-2], 1, v.shape[-1]))
    return torch.cat([k, zero_k], dim=-2), torch.cat([v, zero_v], dim=-2), bias  # bias (hq, sq, sk + 1) broadcasts


def fp32_copies(case: AttnCase, sq: int, sk: int) -> int:
    """Bytes SDPA's math path copies for one sequence: q, k and v upcast to fp32 from half precision, and k and v
    repeated per query head under GQA (ATen's ``_scaled_dot_product_attention_math``): DeepSeek's MLA decode at
    batch 64 x 4,096 would take 136 GiB."""
    gqa = case.heads_q != case.heads_kv
    if case.elem_bytes >= 4 and not gqa:
        return 0
    heads = case.heads_q if gqa else case.heads_kv
    return 4 * (case.heads_q * sq * case.head_dim_qk + heads * sk * (case.head_dim_qk + case.head_dim_v))


@dataclass(frozen=True)
class SdpaBackend:
    kernel: str  # key of _KERNELS
    force_mask: bool = False  # always pass the mask as a dense attn_mask (the mask suite's expression)

    layout = "bhsd"
    has_backward = True
    default_enabled = True
    distribution: ClassVar[str | None] = None  # PyTorch's own (its version is the fingerprint's torch)
    empty_rows = "any"  # SDPA documents no value for a fully masked row: the fuzzer avoids them

    @property
    def name(self) -> str:
        return f"sdpa-{self.kernel}" + ("-mask" if self.force_mask else "")

    @property
    def description(self) -> str:
        how = ", the mask always as a dense bool attn_mask" if self.force_mask else ""
        return f"torch.nn.functional.scaled_dot_product_attention with SDPBackend.{_KERNELS[self.kernel]}{how}"

    @property
    def only_suites(self) -> tuple[str, ...]:
        return ("masks",) if self.force_mask else ()

    def expression(self, case: AttnCase) -> str:
        plan = _mask_plan(case, self.force_mask)
        if plan == "attn_mask":
            return f"attn_mask (dense bool, {case.max_seqlen_q * case.max_seqlen_k / 1e9:.3g} GB)"
        return "is_causal=True" if plan == "is_causal" else "no mask"

    @property
    def needs_cuda(self) -> bool:
        return self.kernel in ("efficient", "cudnn")  # flash and math also have CPU kernels

    @property
    def forms(self) -> tuple[str, ...]:
        return ("sinks",) if self.kernel in SINK_KERNELS else ()

    def available(self) -> str | None:
        try:
            from torch.nn.attention import SDPBackend  # noqa: F401
        except ImportError:
            return "this torch has no torch.nn.attention.SDPBackend (needs torch >= 2.3)"
        return None

    def supports(self, case: AttnCase, device: DeviceInfo) -> str | None:
        if case.dtype == "fp8" or case.kv_dtype == "fp8":
            return "SDPA has no fp8 path"
        if case.ragged:
            return "SDPA takes a dense batch; this case has per-sequence lengths (use the varlen back end)"
        if self.kernel == "flash":
            if case.sinks:
                return NO_SINKS
            if case.head_dim_qk != case.head_dim_v:
                return ("SDPA's flash kernel requires q, k and v to have the same last dimension (head_dim_qk="
                        f"{case.head_dim_qk}, head_dim_v={case.head_dim_v})")
            if _mask_plan(case, self.force_mask) == "attn_mask":
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

    def known_wrong(self, case: AttnCase) -> str | None:
        """Why a wrong output of this case is a known PyTorch bug (:func:`..engine.runner.known_wrong`), or None."""
        if self.kernel != "efficient" or _mask_plan(case, self.force_mask) != "attn_mask":
            return None
        columns = case.max_seqlen_k + (1 if case.sinks else 0)
        if case.max_seqlen_q * columns < MASK_OFFSET_WRAPS:
            return None
        return (f"a known PyTorch bug: the memory-efficient kernel reads an attn_mask past 2^32 elements from wrapped"
                f" addresses, so every query row from 2^32 / {columns} = {MASK_OFFSET_WRAPS // columns} on is wrong"
                " (pytorch/pytorch#187227; seen with torch 2.11 on an H100 and an H200)")

    def workspace_bytes(self, case: AttnCase) -> int:
        mask = 0
        if _mask_plan(case, self.force_mask) == "attn_mask":
            # one bool per pair, shared by the batch, and the additive form SDPA may convert it to
            mask = case.max_seqlen_q * case.max_seqlen_k * (1 + case.elem_bytes)
        if case.sinks:  # a float bias per query head, one key more
            mask = case.heads_q * case.max_seqlen_q * (case.max_seqlen_k + 1) * case.elem_bytes
        if self.kernel != "math":
            return mask
        # math materialises scores and probabilities (fp32 softmax) per (batch, head)
        scores = case.batch * case.heads_q * case.max_seqlen_q * case.max_seqlen_k
        factor = 3 if case.direction == "fwd+bwd" else 2
        copies = case.batch * fp32_copies(case, case.max_seqlen_q, case.max_seqlen_k)
        return mask + scores * (case.elem_bytes + 4) * factor + copies

    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn:
        import torch.nn.functional as F
        from torch.nn.attention import SDPBackend, sdpa_kernel

        backend = getattr(SDPBackend, _KERNELS[self.kernel])
        q, k, v = inputs.q, inputs.k, inputs.v
        plan = _mask_plan(case, self.force_mask)
        kwargs: dict[str, Any] = {"scale": case.scale}
        if case.heads_q != case.heads_kv:
            kwargs["enable_gqa"] = True
        if case.sinks:
            k, v, kwargs["attn_mask"] = with_sink_column(case, q, k, v, inputs.sinks, case.max_seqlen_q,
                                                         case.max_seqlen_k)
        elif plan == "is_causal":
            kwargs["is_causal"] = True
        elif plan == "attn_mask":
            kwargs["attn_mask"] = dense_mask(case.mask, case.max_seqlen_q, case.max_seqlen_k, q.device)

        def forward() -> Any:
            with sdpa_kernel(backend):
                return F.scaled_dot_product_attention(q, k, v, **kwargs)

        call_or_unsupported(self.name, forward)
        return forward


class SdpaLoopBackend:
    """The naive varlen baseline: one SDPA call per sequence of a packed batch, PyTorch choosing the
    kernel, outputs concatenated -- what code without a varlen kernel does."""

    name = "sdpa-loop"
    description = "a Python loop of scaled_dot_product_attention, one call per sequence (naive varlen)"
    layout = "thd"
    needs_cuda = False
    has_backward = True
    default_enabled = True
    distribution: str | None = None  # PyTorch's own
    empty_rows = "any"
    only_suites = ("varlen", "decode")
    forms = ("sinks",)  # PyTorch picks a kernel that takes the float attn_mask sinks need

    def available(self) -> str | None:
        return None

    def supports(self, case: AttnCase, device: DeviceInfo) -> str | None:
        if case.dtype == "fp8" or case.kv_dtype == "fp8":
            return "SDPA has no fp8 path"
        return None

    def workspace_bytes(self, case: AttnCase) -> int:
        pairs = list(zip(case.seqlens_q, case.seqlens_k, strict=True))
        scores = max(sq * sk for sq, sk in pairs) * (1 + case.heads_q * (case.elem_bytes + 4) * 2)
        return scores + max(fp32_copies(case, sq, sk) for sq, sk in pairs)  # one sequence at a time

    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn:
        import torch
        import torch.nn.functional as F


        calls = []
        for i in range(case.batch):
            q, k, v = (sequence(t, "thd", case, i, w) for t, w in ((inputs.q, "q"), (inputs.k, "k"), (inputs.v, "k")))
            one = dataclasses.replace(case, seqlens_q=(case.seqlens_q[i],), seqlens_k=(case.seqlens_k[i],))
            kwargs: dict[str, Any] = {"scale": case.scale, "enable_gqa": case.heads_q != case.heads_kv}
            plan = _mask_plan(one)
            if case.sinks:  # (s, h, d) -> one more key, as SDPA's bhsd wants it, then back
                kb, vb, kwargs["attn_mask"] = with_sink_column(one, q.transpose(0, 1), k.transpose(0, 1),
                                                               v.transpose(0, 1), inputs.sinks, one.seqlens_q[0],
                                                               one.seqlens_k[0])
                k, v = kb.transpose(0, 1), vb.transpose(0, 1)
            elif plan == "is_causal":
                kwargs["is_causal"] = True
            elif plan == "attn_mask":
                kwargs["attn_mask"] = dense_mask(case.mask, one.seqlens_q[0], one.seqlens_k[0], q.device)
            calls.append((q, k, v, kwargs))

        def forward() -> Any:
            outs = [F.scaled_dot_product_attention(q.transpose(0, 1), k.transpose(0, 1), v.transpose(0, 1), **kw)
                    for q, k, v, kw in calls]
            return torch.cat([o.transpose(0, 1) for o in outs])

        call_or_unsupported(self.name, forward)
        return forward


SDPA_BACKENDS = (*(SdpaBackend(k) for k in _KERNELS), SdpaBackend("efficient", force_mask=True))
__all__ = ["SDPA_BACKENDS", "SdpaBackend", "SdpaLoopBackend", "Unsupported"]
