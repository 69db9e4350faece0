"""The padded-batch baseline for serving decode: every request's cache row padded to the longest request
and attended with one ``scaled_dot_product_attention`` call under a key-padding mask -- what code without
a ragged-cache kernel does. The step also does the serving work around it the naive way: the new tokens
are written into the cache rows (an indexed copy), and the rows of the batch gathered from shuffled
cache slots. FLOPs and bytes count the lengths actually drawn, so padding shows as a lower TFLOP/s and
TB/s than the ragged kernels' on the same problem.
"""

from __future__ import annotations

from typing import Any

from ..core.case import AttnCase
from ..core.device import DeviceInfo
from ..core.layouts import Inputs
from ..core.masks import flag_form
from .base import ForwardFn, call_or_unsupported
from .kvcache import CachedCall, cache_bytes, cache_of, dense_cache, per_request


def key_padding_mask(case: AttnCase, lengths: tuple[int, ...], width: int, device: Any) -> Any:
    """``(batch, 1, sq, width)`` bool: request ``i``'s query ``r`` sees key ``j`` when ``j`` is among its
    ``lengths[i]`` keys and inside its mask's bounds, aligned bottom-right to its own length."""
    import torch

    bounds = flag_form(case)
    assert bounds is not None, "custom masks are refused before this"
    left, right = bounds
    sq = case.seqlens_q[0]
    j = torch.arange(width, device=device).view(1, 1, width)
    r = torch.arange(sq, device=device).view(1, sq, 1)
    n = torch.tensor(lengths, device=device).view(-1, 1, 1)
    diag = r + n - sq  # the key each query row is aligned to
    visible = (j < n) & (r >= 0)  # (batch, sq, width)
    if left >= 0:
        visible = visible & (j >= diag - left)
    if right >= 0:
        visible = visible & (j <= diag + right)
    return visible.unsqueeze(1)


class SdpaPaddedBackend:
    name = "sdpa-padded"
    description = "scaled_dot_product_attention over the batch padded to its longest request (key-padding mask)"
    layout = "thd"
    needs_cuda = False
    has_backward = False
    default_enabled = True
    distribution: str | None = None  # PyTorch's own
    empty_rows = "any"
    only_suites = ("decode",)

    def available(self) -> str | None:
        return None

    def supports(self, case: AttnCase, device: DeviceInfo) -> str | None:
        if case.dtype == "fp8" or case.kv_dtype == "fp8":
            return "SDPA has no fp8 path"
        if case.direction != "fwd":
            return "the padded decode baseline is a forward step"
        if len(set(case.seqlens_q)) > 1:
            return "a padded batch has the same number of queries per request"
        if any(q > k for q, k in zip(case.seqlens_q, case.seqlens_k, strict=True)):
            return "each request needs at least as many keys as queries"
        if flag_form(case) is None:
            return f"the key-padding mask combines with causal and window masks only, not {case.mask.id!r}"
        return None

    def workspace_bytes(self, case: AttnCase) -> int:
        width = case.max_seqlen_k
        gathered = case.batch * width * case.heads_kv * (case.head_dim_qk + case.head_dim_v)
        need = cache_bytes(case) + gathered * case.elem_bytes + case.batch * case.seqlens_q[0] * width
        if case.heads_q != case.heads_kv:
            # GQA under a mask goes to SDPA's math path (the flash kernel takes no mask, the efficient one no GQA),
            # which repeats K and V per query head in fp32: DeepSeek's MLA serving step asked 576 GiB of an H200
            # (docs/gpu-validation.md#back-ends-and-kernels)
            expanded = case.batch * case.heads_q * width * (case.head_dim_qk + case.head_dim_v)
            scores = case.batch * case.heads_q * case.seqlens_q[0] * width
            need += (expanded + 2 * scores) * 4
        return need

    def expression(self, case: AttnCase) -> str:
        return f"padded to {case.max_seqlen_k:,} keys per request, attn_mask (dense bool key-padding mask)"

    def key_lengths(self, case: AttnCase) -> tuple[int, ...]:
        """Each request's keys after the call: what its key-padding mask lets through."""
        return case.seqlens_k

    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn:
        import torch
        import torch.nn.functional as F

        cache = dense_cache(case, inputs.k, inputs.v)
        device, b, sq, width = inputs.q.device, case.batch, case.seqlens_q[0], case.max_seqlen_k
        q = inputs.q.reshape(b, sq, *inputs.q.shape[1:]).transpose(1, 2)
        mask = key_padding_mask(case, self.key_lengths(case), width, device)
        rows = torch.tensor(cache.rows, device=device)
        append = cache_of(case).append
        writes: tuple[Any, ...] = ()
        if append:
            cached = torch.tensor(cache_of(case).cached(case.seqlens_k), device=device)
            positions = (cached.view(-1, 1) + torch.arange(append, device=device)).flatten()
            where = (rows.repeat_interleave(append), positions)
            new = [torch.cat([p[-append:] for p in per_request(case, t)]) for t in (inputs.k, inputs.v)]
            writes = (where, new)
        gqa = case.heads_q != case.heads_kv

        def forward() -> Any:
            if writes:
                where, new = writes
                cache.k.index_put_(where, new[0])
                cache.v.index_put_(where, new[1])
            k = cache.k[rows, :width].transpose(1, 2)
            v = cache.v[rows, :width].transpose(1, 2)
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, scale=case.scale, enable_gqa=gqa)
            return out.transpose(1, 2).reshape(b * sq, case.heads_q, case.head_dim_v)

        call = CachedCall(forward, cache.view())
        call_or_unsupported(self.name, call)
        return call
