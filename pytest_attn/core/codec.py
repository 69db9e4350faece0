"""The case's JSON form: one line that names a case completely, and the way back.

Used by the fuzzer's replay command (``python -m pytest_attn.fuzz '<json>'``), the known-failure
ledger's examples, the HBM subprocess and the result record. A mask travels as its id
(``full``, ``causal``, ``win3-1``, ``blocksparse4-d50-s1``, ``prefixlm3``, ``all-true``,
``causal-topleft``, ``doc64-32``, ...); :func:`mask_from_id` rebuilds the ones the catalog and the
strategies make. Pure.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any

from .case import AttnCase, KvCache, Mask
from .masks import all_true, causal, document, prefix_lm, random_block_sparse

FIELDS = ("backend", "shape", "seqlens_q", "seqlens_k", "heads_q", "heads_kv", "head_dim_qk", "head_dim_v", "dtype",
          "mask", "direction", "softmax_scale", "cache", "sinks", "latent_kv", "kv_dtype")


def mask_from_id(mask_id: str) -> Mask:
    """The mask a case names in its id; ValueError for a mask that cannot be rebuilt from its id."""
    if mask_id == "full":
        return Mask.none()
    if mask_id == "causal":
        return Mask.causal()
    if m := re.fullmatch(r"win(-?\d+)-(-?\d+)", mask_id):
        return Mask.window(int(m[1]), int(m[2]))
    if m := re.fullmatch(r"blocksparse(\d+)-d(\d+)-s(\d+)", mask_id):
        return random_block_sparse(int(m[1]), int(m[2]) / 100, int(m[3]))
    if m := re.fullmatch(r"prefixlm(\d+)", mask_id):
        return prefix_lm(int(m[1]))
    if mask_id == "all-true":
        return all_true()
    if mask_id == "causal-topleft":
        return causal("top-left")
    if m := re.fullmatch(r"(doc|doccausal)(\d+(?:-\d+)*)", mask_id):
        return document(tuple(int(x) for x in m[2].split("-")), causal=m[1] == "doccausal")
    raise ValueError(f"mask id {mask_id!r} cannot be rebuilt from its id (full, causal, winL-R, blocksparseB-dP-sS,"
                     " prefixlmP, all-true, causal-topleft, docA-B-...)")


def case_to_dict(case: AttnCase) -> dict[str, Any]:
    return {
        "backend": case.backend, "shape": case.shape, "seqlens_q": list(case.seqlens_q),
        "seqlens_k": list(case.seqlens_k), "heads_q": case.heads_q, "heads_kv": case.heads_kv,
        "head_dim_qk": case.head_dim_qk, "head_dim_v": case.head_dim_v, "dtype": case.dtype, "mask": case.mask.id,
        "direction": case.direction, "softmax_scale": case.softmax_scale,
        **({"cache": dataclasses.asdict(case.cache)} if case.cache is not None else {}),
        # the forms only where used: a plain case's JSON is what it always was
        **({"sinks": True} if case.sinks else {}), **({"latent_kv": True} if case.latent_kv else {}),
        **({"kv_dtype": case.kv_dtype} if case.kv_dtype else {}),
    }


def case_from_dict(data: dict[str, Any], *, strict_mask: bool = True) -> AttnCase:
    """The case a :func:`case_to_dict` dict names. With ``strict_mask=False`` a mask that cannot be
    rebuilt comes back known by its name only (:meth:`Mask.named`), as a result read back from JSON
    needs it; the fuzzer's replay needs the real mask and keeps the default."""
    unknown = set(data) - set(FIELDS)
    if unknown:
        raise ValueError(f"unknown case field(s) {', '.join(sorted(unknown))}; a case has {', '.join(FIELDS)}")
    try:
        mask = mask_from_id(data["mask"])
    except ValueError:
        if strict_mask:
            raise
        mask = Mask.named(data["mask"])
    return AttnCase(
        backend=data["backend"], shape=data.get("shape", "fuzz"), seqlens_q=tuple(data["seqlens_q"]),
        seqlens_k=tuple(data["seqlens_k"]), heads_q=data["heads_q"], heads_kv=data["heads_kv"],
        head_dim_qk=data["head_dim_qk"], head_dim_v=data["head_dim_v"], dtype=data["dtype"], mask=mask,
        direction=data["direction"], softmax_scale=data.get("softmax_scale"),
        cache=KvCache(**data["cache"]) if data.get("cache") else None,
        sinks=data.get("sinks", False), latent_kv=data.get("latent_kv", False), kv_dtype=data.get("kv_dtype"),
    )


def case_json(case: AttnCase, seed: int) -> str:
    """One line that names the example completely: the case and the seed of its inputs."""
    data = case_to_dict(case)
    if data["shape"] == "fuzz":
        del data["shape"]
    return json.dumps({**data, "seed": seed}, separators=(",", ":"))


def case_from_json(text: str) -> tuple[AttnCase, int]:
    data = json.loads(text)
    seed = int(data.pop("seed", 0))
    return case_from_dict(data), seed
