"""FlashInfer: ``single_prefill_with_kv_cache``, ``single_decode_with_kv_cache``, and the batch wrappers'
``plan()`` (what the following ``run()`` calls compute; each ``run()`` is one call).

Argument names follow FlashInfer's documentation (docs.flashinfer.ai, ``flashinfer.prefill`` /
``flashinfer.decode``), bound to the installed signature: single calls take ``q (qo_len, heads, head_dim)``
and ``k, v (kv_len, kv_heads, head_dim)`` in ``kv_layout="NHD"`` (``HND``: heads first); the ragged wrapper
plans ``qo_indptr, kv_indptr, num_qo_heads, num_kv_heads, head_dim_qk``; the paged ones ``paged_kv_indptr``
(or ``indptr``), ``paged_kv_last_page_len`` (``last_page_len``) and ``page_size``: request ``i`` holds
``(pages_i - 1) * page_size + last_page_len_i`` keys."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ..core.workload import Call
from .fa_calls import Bound
from .mask_summary import summarize
from .tensors import dtype_name, dtype_reason, first_reason, lengths


def _window(v: Bound, causal: bool) -> tuple[str, tuple[int, int] | None]:
    raw: Any = v.get("window_left")
    left = -1 if raw is None else int(raw)
    window = (-1 if left < 0 else left, 0 if causal else -1)
    return ("none", None) if window == (-1, -1) else ("causal", None) if window == (-1, 0) else ("window", window)


def _common(v: Bound, dtype: str, heads: int, kv_heads: int, d: int, dv: int) -> dict[str, Any]:
    cap = float(v.get("logits_soft_cap") or 0.0)
    scale = v.get("sm_scale")
    return {"softcap": cap, "scale": None if scale is None else float(scale), "unsupported": first_reason(
        dtype_reason(dtype),
        f"logits_soft_cap={cap}: a soft cap is not in the plugin's cases yet" if cap else "",
        f"kv heads={kv_heads} do not divide heads={heads}" if heads % kv_heads else "",
        f"head_dim_v={dv} differs from head_dim={d}: not replayable yet" if dv != d else "",
        f"pos_encoding_mode={v['pos_encoding_mode']}: rotary inside the call is not timed by the plugin"
        if v.get("pos_encoding_mode") not in (None, "NONE") else "")}


def describe_single(api: str, v: Bound) -> Call:
    q, k = v["q"], v["k"]
    decode = q.dim() == 2
    sq, heads, d = (1, *q.shape) if decode else q.shape
    hnd = v.get("kv_layout", "NHD") == "HND"
    sk, kv_heads = (k.shape[1], k.shape[0]) if hnd else (k.shape[0], k.shape[1])
    dv = v["v"].shape[-1]
    dtype = dtype_name(q.dtype)
    causal = bool(v.get("causal"))
    mask, window = _window(v, causal)
    density, reason = None, ""
    if v.get("custom_mask") is not None:
        s = summarize(v["custom_mask"].reshape(sq, sk), 1, sq, sk)
        mask, window, density = s.kind, s.window, s.density
        reason = s.reason or ("a padded custom_mask: give the valid lengths instead" if s.kind == "padding" else "")
    elif v.get("packed_custom_mask") is not None:
        mask, reason = "custom", "packed_custom_mask: a bit-packed mask is recorded by its shape only"
    common = _common(v, dtype, heads, kv_heads, d, dv)
    common["unsupported"] = first_reason(common["unsupported"], reason)
    return Call(api, 1, sq, sk, heads, kv_heads, d, dv, dtype, mask, window, density, is_causal=causal,
                kv_cache=decode, **common)


def _paged_keys(v: Bound, page_size: int) -> tuple[int, ...]:
    pages = lengths(v["paged_kv_indptr"] if "paged_kv_indptr" in v else v["indptr"])
    last = (v["paged_kv_last_page_len"] if "paged_kv_last_page_len" in v else v["last_page_len"]).tolist()
    return tuple((n - 1) * page_size + int(t) for n, t in zip(pages, last, strict=True))


def describe_plan(api: str, v: Bound) -> Call:
    """A batch wrapper's ``plan()``: ragged prefill, paged prefill, or paged decode (one query a request)."""
    heads, kv_heads = int(v["num_qo_heads"]), int(v["num_kv_heads"])
    d = int(v["head_dim_qk"] if "head_dim_qk" in v else v["head_dim"])
    dv = int(v.get("head_dim_vo") or d)
    dtype = dtype_name(v.get("q_data_type") or v.get("data_type") or "float16")
    page_size = int(v.get("page_size") or 0)
    if api.startswith("BatchPrefillWithRagged"):
        lq, lk = lengths(v["qo_indptr"]), lengths(v["kv_indptr"])
    else:
        lk = _paged_keys(v, page_size)
        lq = lengths(v["qo_indptr"]) if "qo_indptr" in v else (1,) * len(lk)
    causal = bool(v.get("causal"))
    mask, window = _window(v, causal)
    common = _common(v, dtype, heads, kv_heads, d, dv)
    if v.get("custom_mask") is not None or v.get("packed_custom_mask") is not None:
        mask = "custom"
        common["unsupported"] = first_reason(common["unsupported"], "a batch custom mask is recorded by its shape"
                                                                    " only")
    ragged = len(set(lq)) > 1 or len(set(lk)) > 1
    return Call(api, len(lq), max(lq), max(lk), heads, kv_heads, d, dv, dtype, mask, window,
                seqlens_q=lq if ragged else (), seqlens_k=lk if ragged else (), page_size=page_size,
                kv_cache=page_size > 0, is_causal=causal, **common)


FUNCTIONS: dict[str, Callable[[str, Bound], Call]] = {
    "single_prefill_with_kv_cache": describe_single,
    "single_decode_with_kv_cache": describe_single,
}
WRAPPERS: tuple[str, ...] = ("BatchPrefillWithRaggedKVCacheWrapper", "BatchPrefillWithPagedKVCacheWrapper",
                             "BatchDecodeWithPagedKVCacheWrapper")
