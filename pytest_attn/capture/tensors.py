"""What every entry point's description shares: a tensor's dtype in the plugin's names, the direction of a
call (fwd+bwd when autograd records it), a call that cannot be read, and lengths from offsets."""

from __future__ import annotations

import itertools
from typing import Any

from ..core.case import DTYPES, canonical_dtype
from ..core.workload import Call


def dtype_name(dtype: Any) -> str:
    """``torch.bfloat16`` (or the string ``"bfloat16"``) -> ``bf16``; others keep torch's name."""
    return canonical_dtype(str(dtype))


def dtype_reason(dtype: str) -> str:
    return "" if dtype in DTYPES else f"dtype {dtype} is not one the plugin measures ({', '.join(DTYPES)})"


def direction(*tensors: Any) -> str:
    import torch

    grad = torch.is_grad_enabled() and any(t is not None and getattr(t, "requires_grad", False) for t in tensors)
    return "fwd+bwd" if grad else "fwd"


def unreadable(api: str, reason: str) -> Call:
    """A call whose shape could not be read: kept, with why, so it is reported rather than dropped."""
    return Call(api, 1, 1, 1, 1, 1, 1, 1, "?", unsupported=reason)


def lengths(offsets: Any) -> tuple[int, ...]:
    """Per-sequence lengths from cumulative offsets (``cu_seqlens``, an ``indptr``)."""
    values = [int(x) for x in offsets.tolist()]
    return tuple(b - a for a, b in itertools.pairwise(values))


def first_reason(*reasons: str) -> str:
    return next((r for r in reasons if r), "")
