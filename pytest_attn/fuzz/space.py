"""What a back end can be fuzzed with: found by asking its ``supports()`` about small probe cases
(dtypes, head dims, masks, ragged batches, GQA, cross lengths), so every back end is fuzzed within
what it claims to take -- and its refusals are never mistaken for bugs."""

from __future__ import annotations

from typing import Any

from ..backends.base import Backend, unavailable
from ..core.case import AttnCase, Mask
from ..core.device import DeviceInfo
from ..core.masks import prefix_lm, random_block_sparse
from .strategies import Space

CPU_HEAD_DIMS = (8, 16, 24, 32, 40, 64)
GPU_HEAD_DIMS = (16, 32, 40, 64, 72, 80, 96, 128, 256)


def _refusal(backend: Backend, device: DeviceInfo, **fields: Any) -> str | None:
    """Why ``backend`` refuses a small probe case with ``fields`` changed, or None."""
    base: dict[str, Any] = dict(backend=backend.name, shape="probe", seqlens_q=(8,), seqlens_k=(8,), heads_q=2,
                                heads_kv=2, head_dim_qk=32, head_dim_v=32, dtype="bf16" if device.is_cuda else "fp32")
    base.update(fields)
    try:
        return backend.supports(AttnCase(**base), device)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _probe(backend: Backend, device: DeviceInfo, **fields: Any) -> bool:
    return _refusal(backend, device, **fields) is None


def probe_space(
    backend: Backend,
    device: DeviceInfo,
    direction: str,
    *,
    dtypes: tuple[str, ...] | None = None,
    head_dims: tuple[int, ...] | None = None,
) -> Space | str:
    """What ``backend`` takes, found by asking its ``supports()`` about small probe cases; or why it
    cannot be fuzzed here."""
    why = unavailable(backend, device, direction)
    if why:
        return why
    shape: dict[str, Any] = {}
    if _refusal(backend, device, head_dim_qk=64, head_dim_v=64, dtype="bf16") and _probe(
            backend, device, seqlens_q=(1,), seqlens_k=(8,), head_dim_qk=64, head_dim_v=64, dtype="bf16"):
        shape = {"seqlens_q": (1,), "seqlens_k": (8,)}  # a decode-only back end: one query per sequence
    dt_candidates = dtypes or (("fp16", "bf16", "fp32") if device.is_cuda else ("fp32", "bf16"))
    ok_dtypes = tuple(d for d in dt_candidates if _probe(backend, device, dtype=d, head_dim_qk=64, head_dim_v=64,
                                                         **shape))
    if not ok_dtypes:
        why = _refusal(backend, device, dtype=dt_candidates[0], head_dim_qk=64, head_dim_v=64, **shape)
        return f"{backend.name} cannot be fuzzed with small cases of {', '.join(dt_candidates)}: {why}"
    dt = ok_dtypes[0]
    dims = head_dims or (GPU_HEAD_DIMS if device.is_cuda else CPU_HEAD_DIMS)
    ok_dims = tuple(d for d in dims if _probe(backend, device, dtype=dt, head_dim_qk=d, head_dim_v=d, **shape))
    if not ok_dims:
        return f"{backend.name} takes none of the head dims {', '.join(map(str, dims))}"
    d = ok_dims[0]
    common: dict[str, Any] = dict(dtype=dt, head_dim_qk=d, head_dim_v=d, **shape)
    masks = {"none": Mask.none(), "causal": Mask.causal(), "window": Mask.window(3, 2),
             "blocksparse": random_block_sparse(4, 0.5), "prefixlm": prefix_lm(2)}
    kinds = tuple(k for k, m in masks.items() if _probe(backend, device, mask=m, **common))
    plain = {k: v for k, v in common.items() if k not in ("seqlens_q", "seqlens_k")}
    q_longer = _probe(backend, device, seqlens_q=(8,), seqlens_k=(5,), mask=Mask.causal(), **plain)
    empty_rows = getattr(backend, "empty_rows", "any")
    two = {"seqlens_q": (1, 1), "seqlens_k": (3, 8)} if shape else {"seqlens_q": (3, 8), "seqlens_k": (3, 8)}
    return Space(
        dtypes=ok_dtypes,
        head_dims=ok_dims,
        mask_kinds=kinds or ("none",),
        ragged=_probe(backend, device, **{**plain, **two}),
        gqa=_probe(backend, device, heads_q=4, heads_kv=2, **common),
        cross=bool(shape) or _probe(backend, device, seqlens_q=(4,), seqlens_k=(9,), mask=Mask.causal(), **plain),
        queries=1 if shape else None,
        q_longer=q_longer and empty_rows != "any",
        max_len=300 if device.is_cuda else 129,
        long=device.is_cuda,
    )
