"""How a back end holds its tensors, and how to read one sequence out of them.

Layouts: ``bshd`` (flash-attn), ``bhsd`` (SDPA, flex_attention), ``thd`` (packed tokens with
``cu_seqlens``: varlen kernels and the reference). :class:`Inputs` is what a back end's ``prepare``
receives; the engine makes them (:mod:`pytest_attn.engine.inputs`). torch is imported inside the
functions only.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from .case import AttnCase

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


def sequence(t: torch.Tensor, layout: str, case: AttnCase, index: int, which: str = "q") -> torch.Tensor:
    """Sequence ``index`` of a q-side (``which="q"``) or k-side tensor as ``(s, h, d)``."""
    if layout == "bshd":
        return t[index]
    if layout == "bhsd":
        return t[index].transpose(0, 1)
    lengths = case.seqlens_q if which == "q" else case.seqlens_k
    start = sum(lengths[:index])
    return t[start : start + lengths[index]]
