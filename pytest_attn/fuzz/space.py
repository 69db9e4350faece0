"""What a back end can be fuzzed with: found by asking its ``supports()`` about small probe cases
(dtypes, head dims, masks, ragged batches, GQA, cross lengths), so every back end is fuzzed within
what it claims to take -- and its refusals are never mistaken for bugs."""

from __future__ import annotations

from typing import Any

from ..backends.base import Backend, case_refusal, unavailable
from ..core.case import AttnCase, KvCache, Mask
from ..core.device import DeviceInfo
from ..core.masks import prefix_lm, random_block_sparse
from .strategies import Space

CPU_HEAD_DIMS = (8, 16, 24, 32, 40, 64)
GPU_HEAD_DIMS = (16, 32, 40, 64, 72, 80, 96, 128, 256)
#: Unequal (head_dim_qk, head_dim_v) to try: DeepSeek's (192, 128) prefill, and small odd ones on a CPU.
CPU_DIM_PAIRS = ((24, 16), (40, 8), (192, 128))
GPU_DIM_PAIRS = ((192, 128), (128, 64))
#: Absorbed MLA (latent + rope, latent): DeepSeek-V3's (576, 512) on a GPU, its shape in small on a CPU.
CPU_MLA_DIMS = ((24, 16), (48, 32))
GPU_MLA_DIMS = ((576, 512),)
#: A small case standing for each relation of key to query lengths.
RELATION_PROBES: dict[str, dict[str, Any]] = {
    "self": {"seqlens_q": (8,), "seqlens_k": (8,)},
    "prefix": {"seqlens_q": (4,), "seqlens_k": (9,)},
    "decode": {"seqlens_q": (1,), "seqlens_k": (9,)},
    "cross": {"seqlens_q": (8,), "seqlens_k": (5,)},
    # two requests' ragged caches, one new token appended to each
    "serving": {"seqlens_q": (1, 1), "seqlens_k": (3, 17), "cache": KvCache(24, 1)},
}
MASKS = {"none": Mask.none(), "causal": Mask.causal(), "window": Mask.window(3, 2),
         "blocksparse": random_block_sparse(4, 0.5), "prefixlm": prefix_lm(2)}


def _refusal(backend: Backend, device: DeviceInfo, **fields: Any) -> str | None:
    """Why ``backend`` refuses a small probe case with ``fields`` changed, or None."""
    base: dict[str, Any] = dict(backend=backend.name, shape="probe", seqlens_q=(8,), seqlens_k=(8,), heads_q=2,
                                heads_kv=2, head_dim_qk=32, head_dim_v=32, dtype="bf16" if device.is_cuda else "fp32")
    base.update(fields)
    try:
        return case_refusal(backend, AttnCase(**base), device)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _probe(backend: Backend, device: DeviceInfo, **fields: Any) -> bool:
    return _refusal(backend, device, **fields) is None


def probe_space(backend: Backend, device: DeviceInfo, direction: str, *, dtypes: tuple[str, ...] | None = None,
                head_dims: tuple[int, ...] | None = None) -> Space | str:
    """What ``backend`` takes, found by asking its ``supports()`` about small probe cases; or why it
    cannot be fuzzed here."""
    early = unavailable(backend, device, direction) or _latent_only(backend, device, dtypes)  # or an MLA kernel
    if early:
        return early
    decode = _decode_only(backend, device)
    shape = {**decode, **_sinks_only(backend, device, decode)}  # what every probe carries
    dt_candidates = dtypes or (("fp16", "bf16", "fp32") if device.is_cuda else ("fp32", "bf16"))
    ok_dtypes = tuple(d for d in dt_candidates if _probe(backend, device, dtype=d, head_dim_qk=64, head_dim_v=64,
                                                         **shape))
    if not ok_dtypes:
        why = _refusal(backend, device, dtype=dt_candidates[0], head_dim_qk=64, head_dim_v=64, **shape)
        return f"{backend.name} cannot be fuzzed with small cases of {', '.join(dt_candidates)}: {why}"
    dt = ok_dtypes[0]
    dims = _head_dims(backend, device, head_dims)
    ok_dims = tuple(d for d in dims if _probe(backend, device, dtype=dt, head_dim_qk=d, head_dim_v=d, **shape))
    if not ok_dims:
        return f"{backend.name} takes none of the head dims {', '.join(map(str, dims))}"
    d = ok_dims[0]
    common: dict[str, Any] = dict(dtype=dt, head_dim_qk=d, head_dim_v=d, **shape)
    plain = {k: v for k, v in common.items() if k not in ("seqlens_q", "seqlens_k")}
    by_relation = _relation_kinds(backend, device, plain, decode_only=bool(decode), forward=direction == "fwd")
    if not by_relation:
        why = _refusal(backend, device, **common)
        return f"{backend.name} takes no small case of any mask and length relation: {why}"
    kinds = tuple(k for k in MASKS if any(k in ks for ks in by_relation.values()))
    two = {"seqlens_q": (1, 1), "seqlens_k": (3, 8)} if decode else {"seqlens_q": (3, 8), "seqlens_k": (3, 8)}
    return Space(
        dtypes=ok_dtypes,
        head_dims=ok_dims,
        mask_kinds=kinds,
        ragged=_probe(backend, device, **{**plain, **two}),
        gqa=_probe(backend, device, heads_q=4, heads_kv=2, **common),
        cross=any(r != "self" for r in by_relation),
        queries=1 if decode else None,
        q_longer="cross" in by_relation,
        max_len=300 if device.is_cuda else 129,
        long=device.is_cuda,
        by_relation=tuple(by_relation.items()),
        cache_slots="serving" in by_relation and _probe(
            backend, device, **{**plain, **RELATION_PROBES["serving"], "cache": KvCache(24, 1, 3)}),
        **(_forms(backend, device, common) if direction == "fwd" else {}),
    )


def _forms(backend: Backend, device: DeviceInfo, common: dict[str, Any]) -> dict[str, Any]:
    """The :class:`Space` fields of the forms beyond plain attention that ``backend`` takes (forward only)."""
    base = {k: v for k, v in common.items() if k not in ("head_dim_qk", "head_dim_v")}
    pairs = GPU_DIM_PAIRS if device.is_cuda else CPU_DIM_PAIRS
    mla = GPU_MLA_DIMS if device.is_cuda else CPU_MLA_DIMS
    return dict(
        sinks=_probe(backend, device, **{**common, "sinks": True}),
        sinks_only=bool(common.get("sinks")),  # every probe carried a sink: the back end takes no other case
        kv_fp8=common["dtype"] != "fp8" and _probe(backend, device, **common, kv_dtype="fp8"),
        dim_pairs=tuple(p for p in pairs if _probe(backend, device, **base, head_dim_qk=p[0], head_dim_v=p[1])),
        mla_dims=tuple(p for p in mla if _probe(backend, device, **base, heads_q=4, heads_kv=1, head_dim_qk=p[0],
                                                head_dim_v=p[1], latent_kv=True)),
    )


def _latent_only(backend: Backend, device: DeviceInfo, given: tuple[str, ...] | None) -> Space | None:
    """The space of an MLA kernel -- one that refuses a plain decode probe and takes a latent one (one latent KV
    head, the MLA dims of this device, decode lengths, no mask or causal) -- else None."""
    dtypes = given or (("fp16", "bf16") if device.is_cuda else ("fp32", "bf16"))
    decode = {"seqlens_q": (1,), "seqlens_k": (8,), "heads_q": 4, "heads_kv": 1}
    if _probe(backend, device, **decode, head_dim_qk=64, head_dim_v=64, dtype=dtypes[0]):
        return None
    dims = GPU_MLA_DIMS if device.is_cuda else CPU_MLA_DIMS

    def takes(dtype: str, pair: tuple[int, int], **more: Any) -> bool:
        return _probe(backend, device, **{**decode, **more}, head_dim_qk=pair[0], head_dim_v=pair[1], dtype=dtype,
                      latent_kv=True, softmax_scale=None)

    ok_dims = tuple(p for p in dims if any(takes(dt, p) for dt in dtypes))
    if not ok_dims:
        return None
    ok_dtypes = tuple(dt for dt in dtypes if takes(dt, ok_dims[0]))
    kinds = tuple(k for k in ("none", "causal") if takes(ok_dtypes[0], ok_dims[0], mask=MASKS[k]))
    ragged = takes(ok_dtypes[0], ok_dims[0], seqlens_q=(1, 1), seqlens_k=(3, 8))
    return Space(dtypes=ok_dtypes, head_dims=(ok_dims[0][1],), mask_kinds=kinds or ("none",), ragged=ragged, gqa=False,
                 cross=True, q_longer=False, max_len=300 if device.is_cuda else 129, long=device.is_cuda,
                 by_relation=(("decode", kinds or ("none",)),), mla_dims=ok_dims, latent_only=True)


def _head_dims(backend: Backend, device: DeviceInfo, given: tuple[int, ...] | None) -> tuple[int, ...]:
    """The head dims to try: ``given`` (``--attn-fuzz-head-dims``), else on a GPU the back end's own
    ``fuzz_head_dims`` (a library that compiles a kernel per head dim names the few worth it), else
    :data:`GPU_HEAD_DIMS` (:data:`CPU_HEAD_DIMS` on a CPU)."""
    if given:
        return given
    own = getattr(backend, "fuzz_head_dims", None) if device.is_cuda else None
    return own or (GPU_HEAD_DIMS if device.is_cuda else CPU_HEAD_DIMS)


def _decode_only(backend: Backend, device: DeviceInfo) -> dict[str, Any]:
    """The lengths every probe uses for a decode-only back end (one query per sequence), else none."""
    if _refusal(backend, device, head_dim_qk=64, head_dim_v=64, dtype="bf16") and _probe(
            backend, device, seqlens_q=(1,), seqlens_k=(8,), head_dim_qk=64, head_dim_v=64, dtype="bf16"):
        return {"seqlens_q": (1,), "seqlens_k": (8,)}
    return {}


def _sinks_only(backend: Backend, device: DeviceInfo, shape: dict[str, Any]) -> dict[str, Any]:
    """``sinks=True`` for every probe of a back end that takes sink cases only (FlashInfer's sink wrapper), else
    nothing: asked without a sink, it would refuse every probe and never be fuzzed."""
    probe: dict[str, Any] = dict(head_dim_qk=64, head_dim_v=64, dtype="bf16", **shape)
    if _refusal(backend, device, **probe) and _probe(backend, device, **probe, sinks=True):
        return {"sinks": True}
    return {}


def _relation_kinds(backend: Backend, device: DeviceInfo, plain: dict[str, Any], decode_only: bool,
                    forward: bool = True) -> dict[str, tuple[str, ...]]:
    """Per relation, the mask kinds ``backend`` takes with it -- each pair asked separately, so a
    kernel that takes decode lengths only without a mask keeps decode. More queries than keys leaves
    rows without keys under most masks; a back end that gives such rows no defined value
    (``empty_rows="any"``) is fuzzed there without a mask only."""
    relations = ("decode", "serving") if decode_only else tuple(RELATION_PROBES)
    if not forward:  # a KV-cache step is a forward
        relations = tuple(r for r in relations if r != "serving")
    empty_rows = getattr(backend, "empty_rows", "any")
    found = {}
    for relation in relations:
        kinds = tuple(k for k, m in MASKS.items()
                      if _probe(backend, device, **{**plain, **RELATION_PROBES[relation], "mask": m})
                      and (relation != "cross" or empty_rows != "any" or k == "none"))
        if kinds:
            found[relation] = kinds
    return found
