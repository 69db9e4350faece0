"""PyTorch ``flex_attention``, compiled (uncompiled it materialises the full score matrix).

The block mask is built once per case with ``create_block_mask`` outside the timed call; fully
masked blocks are skipped by the kernel. Compilation happens in the warm-up, never in a sample.

Each case compiles afresh (``torch.compiler.reset()`` when the case changes) with
``fullgraph=True``: a session runs many shapes, and past Dynamo's recompile limit (8) a compiled
function silently falls back to eager, which for flex_attention is the unfused path: 10-100x
slower and, at 111,856 tokens, a 1.1 TiB score matrix. With ``fullgraph=True`` any fallback is an
error, reported as the case's skip reason, never a silently wrong benchmark.
"""

from __future__ import annotations

from typing import Any

from ..core.case import AttnCase
from ..core.device import DeviceInfo
from ..core.layouts import Inputs
from ..core.mask_tensors import dense_mask
from ..core.masks import effective_mask
from .base import ForwardFn, call_or_unsupported


def _compiled_flex() -> Any:
    import torch
    from torch.nn.attention.flex_attention import flex_attention

    return torch.compile(flex_attention, dynamic=False, fullgraph=True)


def mask_mod_for(case: AttnCase, device: Any) -> Any:
    """A flex ``mask_mod`` for the case's mask (bottom-right aligned), or None for no mask."""
    mask = effective_mask(case)
    if mask.kind == "none":
        return None
    if mask.kind == "custom":
        table = dense_mask(mask, case.max_seqlen_q, case.max_seqlen_k, device)

        def custom(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
            return table[q_idx, kv_idx]

        return custom
    offset = case.max_seqlen_k - case.max_seqlen_q
    left, right = mask.window_left, mask.window_right

    def windowed(b: Any, h: Any, q_idx: Any, kv_idx: Any) -> Any:
        diag = q_idx + offset
        ok = kv_idx <= diag + right if right >= 0 else kv_idx >= 0
        if left >= 0:
            ok = ok & (kv_idx >= diag - left)
        return ok

    return windowed


class FlexBackend:
    name = "flex"
    description = "torch.nn.attention.flex_attention.flex_attention under torch.compile, with a block mask"
    layout = "bhsd"
    needs_cuda = True
    has_backward = True
    default_enabled = True
    distribution: str | None = None  # PyTorch's own
    empty_rows = "any"  # not verified on a GPU here: the fuzzer gives flex no rows without keys

    def __init__(self) -> None:
        self._compiled: tuple[AttnCase, Any] | None = None

    def _flex_for(self, case: AttnCase) -> Any:
        """The compiled function for this case: fresh per case, shared by its input sets."""
        if self._compiled is None or self._compiled[0] != case:
            import torch

            torch.compiler.reset()
            self._compiled = (case, _compiled_flex())
        return self._compiled[1]

    def available(self) -> str | None:
        try:
            from torch.nn.attention import flex_attention  # noqa: F401
        except ImportError:
            return "this torch has no torch.nn.attention.flex_attention (needs torch >= 2.5)"
        return None

    def supports(self, case: AttnCase, device: DeviceInfo) -> str | None:
        if case.dtype == "fp8" or case.kv_dtype == "fp8":
            return "flex_attention has no fp8 path"
        if case.ragged:
            return "flex_attention takes a dense batch; this case has per-sequence lengths"
        return None

    def workspace_bytes(self, case: AttnCase) -> int:
        return 0

    def expression(self, case: AttnCase) -> str:
        mask = effective_mask(case)
        if mask.kind == "none":
            return "no mask"
        how = "a lookup table" if mask.kind == "custom" else "index arithmetic"
        return f"block mask ({how} as mask_mod)"

    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn:
        from torch.nn.attention.flex_attention import create_block_mask

        q, k, v = inputs.q, inputs.k, inputs.v
        mod = mask_mod_for(case, q.device)
        block_mask = None
        if mod is not None:
            block_mask = create_block_mask(mod, None, None, case.max_seqlen_q, case.max_seqlen_k, device=q.device)
        flex = self._flex_for(case)
        gqa = case.heads_q != case.heads_kv

        def forward() -> Any:
            return flex(q, k, v, block_mask=block_mask, scale=case.scale, enable_gqa=gqa)

        call_or_unsupported(self.name, forward)
        return forward
