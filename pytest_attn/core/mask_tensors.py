"""Masks as torch tensors on the device: the dense bool mask and FlashInfer's packed bits, built once,
outside any timed region. The device-side twins of :func:`pytest_attn.core.masks.dense_mask_np` and
:func:`pytest_attn.core.mask_formats.pack_bits`; torch is imported inside each function, so importing
this module costs nothing.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .case import Mask
from .mask_formats import BIT_WEIGHTS
from .masks import window_rows

if TYPE_CHECKING:
    import torch


def dense_mask(
    mask: Mask,
    seqlen_q: int,
    seqlen_k: int,
    device: torch.device | str = "cpu",
    rows: torch.Tensor | None = None,
) -> torch.Tensor:
    """:func:`dense_mask_np` as a torch bool tensor on ``device``, built once, outside any timing.
    Window masks are built on the device itself; custom masks row-block by row-block, so host memory
    stays bounded (a 111,856-token mask is 12.5 GB on the device, never on the host)."""
    import numpy as np
    import torch

    if mask.kind in ("none", "causal", "window"):
        i = torch.arange(seqlen_q, device=device) if rows is None else rows.to(device)
        if mask.kind == "none":
            return torch.ones((i.shape[0], seqlen_k), dtype=torch.bool, device=device)
        return window_rows(i, torch.arange(seqlen_k, device=device), seqlen_k - seqlen_q,
                            mask.window_left, mask.window_right)
    picked = np.arange(seqlen_q) if rows is None else rows.cpu().numpy()
    out = torch.empty((len(picked), seqlen_k), dtype=torch.bool, device=device)
    block = max(1, (1 << 28) // max(1, seqlen_k))  # 256 MB of host memory a block
    for start in range(0, len(picked), block):
        part = mask.rows(seqlen_q, seqlen_k, picked[start : start + block])
        out[start : start + len(part)] = torch.from_numpy(np.ascontiguousarray(part)).to(device)
    return out


def pack_bits_torch(dense: torch.Tensor, *, chunk_bytes: int = 1 << 28) -> torch.Tensor:
    """:func:`pack_bits` on a torch tensor, on its own device, in chunks (a 12.5 GB mask packs into
    1.6 GB without a second 12.5 GB temporary)."""
    import torch

    flat = dense.reshape(-1)
    n = flat.numel()
    out = torch.empty(-(-n // 8), dtype=torch.uint8, device=dense.device)
    weights = torch.tensor(BIT_WEIGHTS, dtype=torch.uint8, device=dense.device)
    step = max(8, chunk_bytes // 8 * 8)
    for start in range(0, n, step):
        part = flat[start : start + step]
        if part.numel() % 8:
            part = torch.cat([part, part.new_zeros(8 - part.numel() % 8)])
        out[start // 8 : start // 8 + part.numel() // 8] = (part.view(-1, 8).to(torch.uint8) * weights).sum(
            dim=1, dtype=torch.uint8
        )
    return out
