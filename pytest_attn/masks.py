"""Mask helpers shared by back ends and the reference.

Pure NumPy builders (``dense_mask_np``) and their torch counterpart (``dense_mask``). The visible-pair
counts for the FLOP model live in :mod:`pytest_attn.flops`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from .case import AttnCase, Mask
from .flops import visible_pairs

if TYPE_CHECKING:
    import torch


def dense_mask_np(mask: Mask, seqlen_q: int, seqlen_k: int) -> np.ndarray:
    """Boolean ``(seqlen_q, seqlen_k)`` array, True where query i may see key j."""
    if mask.kind == "none":
        return np.ones((seqlen_q, seqlen_k), dtype=bool)
    if mask.kind == "custom":
        assert mask.fn is not None
        return np.asarray(mask.fn(seqlen_q, seqlen_k), dtype=bool)
    left, right = mask.window_left, mask.window_right
    i = np.arange(seqlen_q)[:, None] + (seqlen_k - seqlen_q)  # bottom-right alignment
    j = np.arange(seqlen_k)[None, :]
    visible = np.ones((seqlen_q, seqlen_k), dtype=bool)
    if left >= 0:
        visible &= j >= i - left
    if right >= 0:
        visible &= j <= i + right
    return visible


def dense_mask(
    mask: Mask,
    seqlen_q: int,
    seqlen_k: int,
    device: torch.device | str = "cpu",
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """The same mask as a torch bool tensor on ``device``; only the query ``rows`` when given, so a
    few rows of a 111,856-token case cost kilobytes, not the full matrix."""
    import torch

    if mask.kind == "custom":
        full = torch.from_numpy(dense_mask_np(mask, seqlen_q, seqlen_k)).to(device)
        return full if rows is None else full[rows.to(full.device)]
    i = rows.to(device) if rows is not None else torch.arange(seqlen_q, device=device)
    visible = torch.ones(i.shape[0], seqlen_k, dtype=torch.bool, device=device)
    if mask.kind == "none":
        return visible
    left, right = mask.window_left, mask.window_right
    diag = i[:, None] + (seqlen_k - seqlen_q)  # bottom-right alignment
    j = torch.arange(seqlen_k, device=device)[None, :]
    if left >= 0:
        visible &= j >= diag - left
    if right >= 0:
        visible &= j <= diag + right
    return visible


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

