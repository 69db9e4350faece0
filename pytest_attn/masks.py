"""Mask helpers shared by back ends and the reference.

One builder of the bottom-right window rule (``dense_mask_np``) and its torch view (``dense_mask``).
The visible-pair counts for the FLOP model live in :mod:`pytest_attn.flops` (checked against this
builder by a property test).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .case import AttnCase, Mask
from .flops import visible_pairs

if TYPE_CHECKING:
    import torch


def dense_mask_np(mask: Mask, seqlen_q: int, seqlen_k: int, rows: np.ndarray | None = None) -> np.ndarray:
    """Boolean ``(seqlen_q, seqlen_k)`` array, True where query i may see key j; only the query
    ``rows`` when given, so a few rows of a 111,856-token case cost kilobytes, not the matrix."""
    if mask.kind == "custom":
        assert mask.fn is not None
        full = np.asarray(mask.fn(seqlen_q, seqlen_k), dtype=bool)
        return full if rows is None else full[rows]
    i = np.arange(seqlen_q) if rows is None else np.asarray(rows)
    visible = np.ones((i.shape[0], seqlen_k), dtype=bool)
    if mask.kind == "none":
        return visible
    left, right = mask.window_left, mask.window_right
    diag = i[:, None] + (seqlen_k - seqlen_q)  # bottom-right alignment
    j = np.arange(seqlen_k)[None, :]
    if left >= 0:
        visible &= j >= diag - left
    if right >= 0:
        visible &= j <= diag + right
    return visible


def dense_mask(
    mask: Mask,
    seqlen_q: int,
    seqlen_k: int,
    device: torch.device | str = "cpu",
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`dense_mask_np` as a torch bool tensor on ``device`` (built once, outside any timing)."""
    import torch

    picked = None if rows is None else rows.cpu().numpy()
    return torch.from_numpy(dense_mask_np(mask, seqlen_q, seqlen_k, picked)).to(device)


def is_full(case: AttnCase) -> bool:
    """True when the mask hides nothing on this case (e.g. causal decode with one query)."""
    if case.mask.kind == "none":
        return True
    return all(
        visible_pairs(sq, sk, case.mask) == sq * sk for sq, sk in zip(case.seqlens_q, case.seqlens_k, strict=True)
    )


def effective_mask(case: AttnCase) -> Mask:
    """The case's mask, or ``Mask.none()`` when it hides nothing: back ends then skip mask work."""
    return Mask.none() if is_full(case) else case.mask

