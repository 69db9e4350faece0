"""Converters from the dense boolean mask to each library's format. Pure NumPy (the torch twin of
:func:`pack_bits`, for masks too big for the host, is :func:`pytest_attn.core.mask_tensors.pack_bits_torch`).

* **packed bits** (FlashInfer ``packed_custom_mask``): the mask flattened query-major, 8 pairs per
  byte, **little** bit order (pair ``8n + b`` is bit ``b`` of byte ``n``). FlashInfer's own
  ``packbits`` defaults to *big* order, which gives wrong output silently.
* **BSR** (FlashInfer ``BlockSparseAttentionWrapper``): tiles of ``R x C`` that hold any visible
  pair, as ``indptr``/``indices``; tiles that are only partly visible need a per-tile mask
  (``(nnz, R, C)``), which puts the kernel back on its custom-mask path.
* **SDPA** ``attn_mask`` is the dense bool mask itself (:func:`pytest_attn.core.mask_tensors.dense_mask`);
  **flex** block masks are built from a ``mask_mod`` (:mod:`pytest_attn.backends.torch_flex`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import numpy as np


BIT_WEIGHTS = (1, 2, 4, 8, 16, 32, 64, 128)  # little bit order


def pack_bits(dense: np.ndarray) -> np.ndarray:
    """Dense bool mask -> 1-D uint8, query-major, little bit order (FlashInfer's format)."""
    import numpy as np
    return np.packbits(np.asarray(dense, dtype=bool).reshape(-1), bitorder="little")


def unpack_bits(packed: np.ndarray, seqlen_q: int, seqlen_k: int) -> np.ndarray:
    """Inverse of :func:`pack_bits`."""
    import numpy as np
    flat = np.unpackbits(np.asarray(packed, dtype=np.uint8), count=seqlen_q * seqlen_k, bitorder="little")
    return flat.reshape(seqlen_q, seqlen_k).astype(bool)


@dataclass(frozen=True)
class Bsr:
    """A mask as block-sparse rows of ``R x C`` tiles."""

    indptr: np.ndarray  # (MB + 1,) int32
    indices: np.ndarray  # (nnz,) int32, tile column of each kept tile
    tile_masks: np.ndarray | None  # (nnz, R, C) bool when any kept tile is partial, else None
    seqlen_q: int
    seqlen_k: int
    R: int
    C: int
    partial_tiles: int

    @property
    def nnz(self) -> int:
        return int(self.indices.shape[0])

    @property
    def exact(self) -> bool:
        """Every kept tile is fully visible: the kernel needs no per-pair mask."""
        return self.partial_tiles == 0

    def describe(self) -> str:
        tail = "all tiles whole" if self.exact else f"{self.partial_tiles} partial tiles carry a per-pair mask"
        return f"BSR {self.R}x{self.C}, {self.nnz} tiles ({tail})"


def bsr_block_width(seqlen_k: int, preferred: int = 128, smallest: int = 16) -> int | None:
    """The widest tile width <= ``preferred`` dividing ``seqlen_k`` (FlashInfer needs N % C == 0),
    or None when none >= ``smallest`` does."""
    c = preferred
    while c >= smallest:
        if seqlen_k % c == 0:
            return c
        c //= 2
    return None


def to_bsr(dense: np.ndarray, R: int, C: int) -> Bsr:
    """Dense bool ``(sq, sk)`` mask -> :class:`Bsr`. ``sk`` must be a multiple of ``C``; the last row
    of tiles may be short (padded rows are invisible)."""
    import numpy as np
    dense = np.asarray(dense, dtype=bool)
    sq, sk = dense.shape
    if sk % C:
        raise ValueError(f"seqlen_k={sk} is not a multiple of the tile width C={C}")
    mb = -(-sq // R)
    padded = np.zeros((mb * R, sk), dtype=bool)
    padded[:sq] = dense
    tiles = padded.reshape(mb, R, sk // C, C).transpose(0, 2, 1, 3)  # (MB, NB, R, C)
    valid_rows = np.zeros((mb * R,), dtype=bool)
    valid_rows[:sq] = True
    rows_in_tile = valid_rows.reshape(mb, R)
    any_visible = tiles.any(axis=(2, 3))
    # a tile is whole when every pair of its real rows is visible
    whole = (tiles | ~rows_in_tile[:, None, :, None]).all(axis=(2, 3))
    keep_r, keep_c = np.nonzero(any_visible)
    indptr = np.zeros(mb + 1, dtype=np.int32)
    np.cumsum(np.bincount(keep_r, minlength=mb), out=indptr[1:])
    partial = int((any_visible & ~whole).sum())
    tile_masks = tiles[keep_r, keep_c] if partial else None
    return Bsr(indptr, keep_c.astype(np.int32), tile_masks, sq, sk, R, C, partial)


def from_bsr(bsr: Bsr) -> np.ndarray:
    """Inverse of :func:`to_bsr` (for tests and checks)."""
    import numpy as np
    mb = bsr.indptr.shape[0] - 1
    out = np.zeros((mb * bsr.R, bsr.seqlen_k), dtype=bool)
    for row in range(mb):
        for n in range(int(bsr.indptr[row]), int(bsr.indptr[row + 1])):
            col = int(bsr.indices[n])
            tile = np.ones((bsr.R, bsr.C), dtype=bool) if bsr.tile_masks is None else bsr.tile_masks[n]
            out[row * bsr.R : (row + 1) * bsr.R, col * bsr.C : (col + 1) * bsr.C] = tile
    return out[: bsr.seqlen_q]
