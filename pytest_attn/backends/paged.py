"""Paged KV caches as serving engines hold them: keys and values copied into fixed-size pages in a
shuffled page order (as an allocator leaves them), with the index arrays each library reads.
FlashInfer takes ``indptr``/``indices``/``last_page_len``; flash-attn takes the same page list as a
``(batch, pages_per_sequence)`` block table. Built once, outside the timed call.
"""

from __future__ import annotations

import itertools
from typing import Any


def paged_kv(k: Any, v: Any, seqlens: tuple[int, ...], page: int, seed: int = 0) -> tuple[Any, ...]:
    """Packed ``(total, h, d)`` k and v copied into ``page``-key pages in a shuffled order, with
    FlashInfer's ``indptr``, ``indices`` and ``last_page_len`` (int32)."""
    import torch

    counts = [-(-n // page) for n in seqlens]
    total = sum(counts)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    order = torch.randperm(total, generator=gen)
    pages = []
    for t in (k, v):
        out = torch.zeros((total, page, *t.shape[1:]), dtype=t.dtype, device=t.device)
        start, first = 0, 0
        for n, c in zip(seqlens, counts, strict=True):
            padded = torch.zeros((c * page, *t.shape[1:]), dtype=t.dtype, device=t.device)
            padded[:n] = t[start : start + n]
            out[order[first : first + c].to(t.device)] = padded.view(c, page, *t.shape[1:])
            start, first = start + n, first + c
        pages.append(out)
    indptr = torch.tensor([0, *itertools.accumulate(counts)], dtype=torch.int32, device=k.device)
    indices = order.to(torch.int32).to(k.device)
    last = torch.tensor([n - page * (c - 1) for n, c in zip(seqlens, counts, strict=True)], dtype=torch.int32,
                        device=k.device)
    return pages[0], pages[1], indptr, indices, last


def paged_cache(k: Any, v: Any, page: int, seed: int = 0) -> tuple[Any, Any, Any]:
    """A dense ``(b, s, h, d)`` cache copied into ``page``-key pages in a shuffled order, with the
    ``(b, pages_per_seq)`` int32 block table flash-attn reads: :func:`paged_kv`'s page list as a table."""
    b, s = k.shape[:2]
    k_pages, v_pages, _, indices, _ = paged_kv(k.reshape(b * s, *k.shape[2:]), v.reshape(b * s, *v.shape[2:]),
                                               (s,) * b, page, seed)
    return k_pages, v_pages, indices.view(b, -1)


def pages_bytes(seqlens: tuple[int, ...], page: int, heads_kv: int, head_dim: int, elem_bytes: int) -> int:
    """Device memory of a paged copy of k and v (whole pages)."""
    pages = sum(-(-n // page) for n in seqlens)
    return 2 * pages * page * heads_kv * head_dim * elem_bytes
