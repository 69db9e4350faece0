"""flash-attn's ``flash_attn_func``, ``flash_attn_varlen_func`` and ``flash_attn_with_kvcache`` (FA2, FA3) and FA4's
``flash_attn.cute`` ``flash_attn_func`` / ``flash_attn_varlen_func``: a call's shape.

Arguments are bound to the installed function's own signature, so positional and keyword calls read alike
(documented in flash_attn/flash_attn_interface.py and flash_attn/cute/interface.py): ``q, k, v`` are
``(batch, seqlen, heads, head_dim)``; varlen packs them ``(total, heads, head_dim)`` with ``cu_seqlens_q/k``
(FA4: either may be absent, and ``seqused_k`` gives each request's keys); with ``block_table`` (FA4:
``page_table``) the keys are pages ``(num_blocks, page_size, kv_heads, head_dim)``; ``flash_attn_with_kvcache``
attends each request over ``cache_seqlens`` cached keys (less ``cache_leftpad``) plus the ``k`` it appends.
``causal`` and ``window_size`` are bottom-right aligned, as the plugin's masks are (FA4 spells an unbounded side
``None``)."""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable
from typing import Any

from ..core.workload import Call
from .tensors import direction, dtype_name, dtype_reason, first_reason, lengths

Bound = dict[str, Any]


@functools.lru_cache(maxsize=64)  # read once per entry point, not at every call
def _signature(original: Callable[..., Any]) -> inspect.Signature:
    return inspect.signature(original)


def bind(original: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any]) -> Bound:
    bound = _signature(original).bind(*args, **kwargs)
    bound.apply_defaults()
    return dict(bound.arguments)


def mask_of(v: Bound) -> tuple[str, tuple[int, int] | None]:
    left, right = (v.get("window_size") or (-1, -1))[:2]
    left, right = (-1 if left is None or left < 0 else int(left)), (-1 if right is None or right < 0 else int(right))
    if v.get("causal"):
        right = 0
    window = (left, right)
    return ("none", None) if window == (-1, -1) else ("causal", None) if window == (-1, 0) else ("window", window)


def _reasons(v: Bound, dtype: str, heads: int, kv_heads: int, d: int, dv: int) -> str:
    dropout, softcap = float(v.get("dropout_p") or 0.0), float(v.get("softcap") or 0.0)
    return first_reason(
        dtype_reason(dtype),
        f"dropout_p={dropout}: the plugin times attention without dropout" if dropout > 0 else "",
        "alibi_slopes: ALiBi is not in the plugin's cases" if v.get("alibi_slopes") is not None else "",
        f"softcap={softcap}: a soft cap is not in the plugin's cases yet" if softcap else "",
        "attention sinks: not in the plugin's cases yet" if _given(v, "learnable_sink", "sinks") else "",
        "a score_mod or mask_mod callable: only its shape could be recorded" if _given(v, "score_mod", "mask_mod")
        else "",
        "qv (an extra query input): not in the plugin's cases" if _given(v, "qv") else "",
        f"kv heads={kv_heads} do not divide heads={heads}" if heads % kv_heads else "",
        f"head_dim_v={dv} differs from head_dim={d}: not replayable yet" if dv != d else "")


def _given(v: Bound, *names: str) -> bool:
    return any(v.get(n) is not None for n in names)


def _scale(v: Bound) -> float | None:
    return None if v.get("softmax_scale") is None else float(v["softmax_scale"])


def describe_dense(api: str, v: Bound) -> Call:
    q, k, val = v["q"], v["k"], v["v"]
    batch, sq, heads, d = q.shape
    sk, kv_heads, dv = k.shape[1], k.shape[2], val.shape[3]
    mask, window = mask_of(v)
    dtype = dtype_name(q.dtype)
    return Call(api, batch, sq, sk, heads, kv_heads, d, dv, dtype, mask, window, is_causal=bool(v.get("causal")),
                scale=_scale(v), softcap=float(v.get("softcap") or 0.0), direction=direction(q, k, val),
                unsupported=_reasons(v, dtype, heads, kv_heads, d, dv))


def _varlen_lengths(v: Bound, table: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    q, k = v["q"], v["k"]
    lq = lengths(v["cu_seqlens_q"]) if v.get("cu_seqlens_q") is not None else (q.shape[1],) * q.shape[0]
    if v.get("seqused_k") is not None:
        return lq, tuple(int(n) for n in v["seqused_k"].tolist())
    if v.get("cu_seqlens_k") is not None:
        return lq, lengths(v["cu_seqlens_k"])
    return lq, (table.shape[1] * k.shape[1] if table is not None else k.shape[1],) * len(lq)


def describe_varlen(api: str, v: Bound) -> Call:
    q, k, val = v["q"], v["k"], v["v"]
    heads, d = q.shape[-2], q.shape[-1]
    table: Any = v.get("block_table") if v.get("block_table") is not None else v.get("page_table")  # FA4
    paged = table is not None
    kv_heads, dv = k.shape[-2], val.shape[-1]
    lq, lk = _varlen_lengths(v, table)
    ragged = len(set(lq)) > 1 or len(set(lk)) > 1
    mask, window = mask_of(v)
    dtype = dtype_name(q.dtype)
    return Call(api, len(lq), max(lq), max(lk), heads, kv_heads, d, dv, dtype, mask, window,
                seqlens_q=lq if ragged else (), seqlens_k=lk if ragged else (), page_size=k.shape[1] if paged else 0,
                kv_cache=paged, is_causal=bool(v.get("causal")), scale=_scale(v),
                softcap=float(v.get("softcap") or 0.0), direction=direction(q, k, val),
                unsupported=_reasons(v, dtype, heads, kv_heads, d, dv))


def describe_kvcache(api: str, v: Bound) -> Call:
    q, k_cache, v_cache, k_new = v["q"], v["k_cache"], v["v_cache"], v.get("k")
    batch, sq, heads, d = q.shape
    kv_heads, dv = k_cache.shape[2], v_cache.shape[3]
    table: Any = v.get("block_table") if v.get("block_table") is not None else v.get("page_table")  # FA3
    paged = table is not None
    capacity = table.shape[1] * k_cache.shape[1] if paged else k_cache.shape[1]
    append = k_new.shape[1] if k_new is not None else 0
    cached = v.get("cache_seqlens")
    if cached is None:
        before = [capacity - append] * batch
    elif isinstance(cached, int):
        before = [cached] * batch
    else:
        before = [int(x) for x in cached.tolist()]
    if v.get("cache_leftpad") is not None:
        before = [n - int(p) for n, p in zip(before, v["cache_leftpad"].tolist(), strict=True)]
    keys = tuple(n + append for n in before)
    mask, window = mask_of(v)
    dtype = dtype_name(q.dtype)
    return Call(api, batch, sq, max(keys), heads, kv_heads, d, dv, dtype, mask, window,
                seqlens_k=keys if len(set(keys)) > 1 else (), page_size=k_cache.shape[1] if paged else 0,
                kv_cache=True, append=append, is_causal=bool(v.get("causal")), scale=_scale(v),
                softcap=float(v.get("softcap") or 0.0), direction="fwd",
                unsupported=first_reason(
                    _reasons(v, dtype, heads, kv_heads, d, dv),
                    "rotary_cos: the rotary embedding inside the call is not timed by the plugin"
                    if v.get("rotary_cos") is not None else ""))


#: The modules whose entry points are wrapped, and the prefix of their records' ``api``: FA2 (``flash_attn``, its
#: interface module), FA3 (``flash_attn_interface``, Hopper builds), FA4 (``flash_attn.cute``).
MODULES: dict[str, str] = {"flash_attn": "", "flash_attn.flash_attn_interface": "", "flash_attn_interface": "fa3.",
                           "flash_attn.cute": "fa4."}
#: entry point -> how to read it
DESCRIBE: dict[str, Callable[[str, Bound], Call]] = {
    "flash_attn_func": describe_dense,
    "flash_attn_varlen_func": describe_varlen,
    "flash_attn_with_kvcache": describe_kvcache,
}
