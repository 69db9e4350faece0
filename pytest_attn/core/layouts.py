"""How a back end holds its tensors, and how to read one sequence out of them.

Layouts: ``bshd`` (flash-attn), ``bhsd`` (SDPA, flex_attention), ``thd`` (packed tokens with
``cu_seqlens``: varlen kernels and the reference). :class:`Inputs` is what a back end's ``prepare``
receives; the engine makes them (:mod:`pytest_attn.engine.inputs`). torch is imported inside the
functions only.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from .case import AttnCase, KvCache

if TYPE_CHECKING:
    import torch

LAYOUTS: tuple[str, ...] = ("bshd", "bhsd", "thd")


def torch_dtype(name: str) -> torch.dtype:
    import torch

    return {
        "fp16": torch.float16,
        "bf16": torch.bfloat16,
        "fp32": torch.float32,
        "fp8": torch.float8_e4m3fn,
    }[name]


@dataclass
class Inputs:
    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    layout: str
    cu_seqlens_q: torch.Tensor | None = None
    cu_seqlens_k: torch.Tensor | None = None
    grad_out: torch.Tensor | None = None
    sinks: torch.Tensor | None = None  # a case with sinks: one fp32 logit per query head, (heads_q,)
    k_scale: float = 1.0  # an fp8 KV cache: the real key is k.float() * k_scale
    v_scale: float = 1.0  # ... and the real value v.float() * v_scale


def sequence(t: torch.Tensor, layout: str, case: AttnCase, index: int, which: str = "q") -> torch.Tensor:
    """Sequence ``index`` of a q-side (``which="q"``) or k-side tensor as ``(s, h, d)``."""
    if layout == "bshd":
        return t[index]
    if layout == "bhsd":
        return t[index].transpose(0, 1)
    lengths = case.seqlens_q if which == "q" else case.seqlens_k
    start = sum(lengths[:index])
    return t[start : start + lengths[index]]


# ---- KV caches (built by pytest_attn.backends.kvcache, checked by pytest_attn.oracle.cache) ----------
#: What unwritten cache positions hold (keys and values): large enough that a kernel reading one changes
#: the output far beyond any rounding, finite so the check names the position instead of a NaN.
POISON = 8.0


def cache_of(case: AttnCase) -> KvCache:
    """The case's cache, or for a plain decode case a cache exactly as long as its longest request."""
    return case.cache if case.cache is not None else KvCache(case.max_seqlen_k)


def per_request(case: AttnCase, packed: Any, which: str = "k") -> list[Any]:
    """A packed ``(total, h, d)`` tensor split into one ``(n_i, h, d)`` piece per request."""
    lengths = case.seqlens_k if which == "k" else case.seqlens_q
    out, start = [], 0
    for n in lengths:
        out.append(packed[start : start + n])
        start += n
    return out


@dataclass
class CacheView:
    """A cache after a call, per request in logical order, and the parts no request owns."""

    keys: Callable[[int], Any]  # request -> (positions, heads_kv, d)
    values: Callable[[int], Any]
    spare: Callable[[], list[Any]] = field(default=lambda: [])
