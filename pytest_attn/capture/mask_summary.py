"""A boolean or additive attention mask, summarised in the plugin's terms: none, causal (bottom-right), a
window, padding (each sequence's valid queries and keys, the rest masked out) or custom, with its density.
Reads the mask only; reductions over it, then vectors of one entry per query row (never a seqlen_q x
seqlen_k index array, which would cost 8x the mask)."""

from __future__ import annotations

import weakref
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class MaskSummary:
    kind: str  # none, causal, window, padding, custom
    window: tuple[int, int] | None = None
    density: float | None = None
    seqlens_q: tuple[int, ...] = ()  # padding: each sequence's valid queries
    seqlens_k: tuple[int, ...] = ()  # padding: each sequence's valid keys
    reason: str = ""  # custom: why the plugin cannot replay it


def band(allowed: Any) -> tuple[int, int] | None:
    """The window (left, right) of a 2-D boolean ``(nq, nk)`` mask in flash-attn's bottom-right convention
    (-1: unbounded), or None when the mask is not such a band (a row sees no key, or keys with a gap)."""
    import torch

    nq, nk = allowed.shape
    count = allowed.sum(dim=1)
    if bool((count == 0).any()):
        return None
    first = allowed.int().argmax(dim=1)
    last = nk - 1 - allowed.flip(1).int().argmax(dim=1)
    if not bool((last - first + 1 == count).all()):
        return None  # a row's visible keys have a gap
    diag = torch.arange(nq, device=allowed.device) + (nk - nq)
    left, right = int((diag - first).max()), int((last - diag).max())
    if left < 0 or right < 0:
        return None  # the band misses the diagonal (top-left causal with seqlen_q < seqlen_k, say)
    starts, ends = (diag - left).clamp(min=0), (diag + right).clamp(max=nk - 1)
    if not (bool((first == starts).all()) and bool((last == ends).all())):
        return None
    # unbounded where no row is cut: every row sees key 0 (left), every row sees the last key (right)
    return (-1 if left >= nk - 1 else left, -1 if right >= nq - 1 else right)


def _kind(window: tuple[int, int]) -> str:
    return "none" if window == (-1, -1) else "causal" if window == (-1, 0) else "window"


def _allowed(mask: Any) -> tuple[Any, str]:
    """The boolean "may see" tensor of a boolean or additive mask, or a reason it is not one."""
    import torch

    if mask.dtype == torch.bool:
        return mask, ""
    if not mask.is_floating_point():
        return None, f"an attn_mask of dtype {mask.dtype} (neither boolean nor additive)"
    blocked = mask <= torch.finfo(mask.dtype).min / 2
    if bool((mask[~blocked] != 0).any()):
        return ~blocked, "an additive attn_mask that carries a bias (values other than 0 and -inf): ALiBi or similar"
    return ~blocked, ""


def summarize(mask: Any, batch: int, seqlen_q: int, seqlen_k: int) -> MaskSummary:
    """What ``mask`` (broadcastable to ``(batch, heads, seqlen_q, seqlen_k)``) does."""
    allowed, reason = _allowed(mask)
    if allowed is None:
        return MaskSummary("custom", reason=reason)
    while allowed.dim() < 4:
        allowed = allowed.unsqueeze(0)
    allowed = allowed.expand(allowed.shape[0], allowed.shape[1], seqlen_q, seqlen_k)
    density = float(allowed.float().mean())
    if reason:
        return MaskSummary("custom", density=density, reason=reason)
    if allowed.shape[1] > 1 and not bool((allowed == allowed[:, :1]).all()):
        return MaskSummary("custom", density=density, reason="an attn_mask that differs between heads")
    per_seq = allowed[:, 0]
    keys, rows = per_seq.any(dim=1), per_seq.any(dim=2)
    if bool(keys.all()) and bool(rows.all()):
        if per_seq.shape[0] > 1 and not bool((per_seq == per_seq[:1]).all()):
            return MaskSummary("custom", density=density, reason="an attn_mask that differs between sequences"
                                                                 " (not as padding does)")
        window = band(per_seq[0])
        if window is None:
            return MaskSummary("custom", density=density, reason="an attn_mask that is no band (causal, window)"
                                                                 " nor padding")
        return MaskSummary(_kind(window), window if _kind(window) == "window" else None, density)
    return _padding(per_seq, keys, rows, batch, density)


def _padding(per_seq: Any, keys: Any, rows: Any, batch: int, density: float) -> MaskSummary:
    """Each sequence's valid queries and keys, where what is left of its mask is the same band for all."""
    windows, lengths_q, lengths_k = set(), [], []
    for b in range(per_seq.shape[0]):
        sub = per_seq[b][rows[b]][:, keys[b]]
        if sub.numel() == 0:
            return MaskSummary("custom", density=density, reason=f"sequence {b} of the attn_mask sees no key")
        windows.add(band(sub))
        lengths_q.append(int(rows[b].sum()))
        lengths_k.append(int(keys[b].sum()))
    if len(windows) != 1 or None in windows or _kind(next(iter(windows)) or (0, 0)) == "window":
        return MaskSummary("custom", density=density, reason="a padded attn_mask whose valid part is neither full"
                                                             " nor causal in every sequence")
    if len(lengths_q) == 1 and batch > 1:
        lengths_q, lengths_k = lengths_q * batch, lengths_k * batch
    window = next(iter(windows))
    assert window is not None
    return MaskSummary("padding", window, density, tuple(lengths_q), tuple(lengths_k))


class MaskCache:
    """Each distinct mask tensor summarised once: a model builds one mask a step and hands it to every layer, and
    a summary of a mask on a GPU waits for the GPU. A tensor is the same while it is alive, unmodified (its
    version counter) and viewed alike."""

    def __init__(self, size: int = 8) -> None:
        self.size = size
        self.read = 0  # summaries computed (not served from the cache)
        self._entries: dict[int, tuple[Any, tuple[Any, ...], MaskSummary]] = {}

    def summarize(self, mask: Any, batch: int, seqlen_q: int, seqlen_k: int) -> MaskSummary:
        key = (mask.data_ptr(), tuple(mask.shape), tuple(mask.stride()), mask.dtype, mask._version, batch, seqlen_q,
               seqlen_k)
        hit = self._entries.get(id(mask))
        if hit is not None and hit[0]() is mask and hit[1] == key:
            return hit[2]
        summary = summarize(mask, batch, seqlen_q, seqlen_k)
        self.read += 1
        if len(self._entries) >= self.size:
            del self._entries[next(iter(self._entries))]
        self._entries[id(mask)] = (weakref.ref(mask), key, summary)
        return summary
