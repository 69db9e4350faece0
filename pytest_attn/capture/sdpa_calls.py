"""``torch.nn.functional.scaled_dot_product_attention``: a call's shape in the plugin's terms.

Layout ``(batch, heads, seqlen, head_dim)``. ``is_causal=True`` is top-left aligned in SDPA; it is the
plugin's (bottom-right) causal only where ``seqlen_q == seqlen_k``. A boolean or additive ``attn_mask`` is
summarised by :mod:`.mask_summary`."""

from __future__ import annotations

from typing import Any

from ..core.workload import Call
from .mask_summary import MaskCache
from .tensors import direction, dtype_name, dtype_reason, first_reason, unreadable

API = "sdpa"
PARAMS = ("query", "key", "value", "attn_mask", "dropout_p", "is_causal", "scale", "enable_gqa")


def bind(args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
    values = dict(zip(PARAMS, args, strict=False))
    values.update(kwargs)
    return values


def describe(args: tuple[Any, ...], kwargs: dict[str, Any], masks: MaskCache) -> Call:
    v = bind(args, kwargs)
    q, k, val = v["query"], v["key"], v["value"]
    if any(getattr(t, "is_nested", False) for t in (q, k, val)):
        return unreadable(API, "nested (jagged) tensors: give the lengths as a padded batch or flash-attn varlen")
    if not all(hasattr(t, "dim") and t.dim() == 4 for t in (q, k, val)):
        dims = "/".join(str(t.dim()) if hasattr(t, "dim") else "?" for t in (q, k, val))
        return unreadable(API, f"query/key/value of {dims} dimensions: the plugin replays (batch, heads, seqlen,"
                               " head_dim) calls only")
    batch, heads, sq, d = q.shape
    kv_heads, sk, dv = k.shape[1], k.shape[2], val.shape[3]
    is_causal, dropout = bool(v.get("is_causal", False)), float(v.get("dropout_p", 0.0) or 0.0)
    scale = v.get("scale")
    dtype = dtype_name(q.dtype)
    lengths_q: tuple[int, ...] = ()
    lengths_k: tuple[int, ...] = ()
    mask, window, density, mask_reason = "none", None, None, ""
    if v.get("attn_mask") is not None:
        s = masks.summarize(v["attn_mask"], batch, sq, sk)
        mask, window, density, lengths_q, lengths_k, mask_reason = (s.kind, s.window, s.density, s.seqlens_q,
                                                                    s.seqlens_k, s.reason)
        if mask == "padding":
            window = None if s.window == (-1, -1) else s.window
    elif is_causal:
        mask = "causal"
        if sq != sk:
            mask_reason = (f"is_causal=True with seqlen_q={sq} != seqlen_k={sk}: SDPA aligns it top-left, the"
                           " plugin's causal is bottom-right (flash-attn's); pass the mask explicitly")
    reason = first_reason(
        dtype_reason(dtype),
        f"dropout_p={dropout}: the plugin times attention without dropout" if dropout > 0 else "",
        f"batch of key/value ({k.shape[0]}) differs from the query's ({batch})" if k.shape[0] != batch else "",
        f"kv heads={kv_heads} do not divide heads={heads}" if heads % kv_heads else "",
        f"head_dim_v={dv} differs from head_dim={d}: not replayable yet" if dv != d else "",
        mask_reason)
    return Call(API, batch, sq, sk, heads, kv_heads, d, dv, dtype, mask, window, density,
                tuple(lengths_q), tuple(lengths_k), is_causal=is_causal,
                scale=None if scale is None else float(scale), enable_gqa=bool(v.get("enable_gqa", False)),
                direction=direction(q, k, val), unsupported=reason)
