"""KV caches as serving engines hold them, built from a case's packed keys and values outside the timed
call: dense (a row of ``capacity`` keys per request, the requests in shuffled rows when the case has
``slots``) or paged (pages of the library's size in a shuffled order, with a block table or FlashInfer's
index arrays).

Request ``i`` of a case holds ``seqlens_k[i] - append`` keys before the call (its packed keys' first
ones); its last ``append`` packed keys are the new tokens the call writes. Every position no request has
written -- the rest of a row, the append positions before the call, rows and pages no request owns --
holds :data:`POISON`, so a kernel that reads past a request's length meets keys that swamp its softmax,
and a write to the wrong place is visible. :class:`CacheView` reads a cache back per request in logical
order: what :func:`pytest_attn.oracle.cache.check_cache` compares with the request's own keys.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from ..core.case import AttnCase
from ..core.layouts import POISON, CacheView, Inputs, cache_of, per_request

__all__ = ["POISON", "CacheView", "CachedCall", "cache_of", "dense_cache", "paged_cache", "per_request"]

class CachedCall:
    """A forward whose call writes into a KV cache; the oracle reads :attr:`cache` after it."""

    def __init__(self, fn: Callable[[], Any], cache: CacheView) -> None:
        self.fn, self.cache = fn, cache

    def __call__(self) -> Any:
        return self.fn()


@dataclass
class DenseCache:
    k: Any  # (rows, capacity, heads_kv, d)
    v: Any
    cached: Any  # int32 (batch,): each request's length before the call
    rows: list[int]  # request -> its row
    batch_idx: Any | None  # int32 (batch,) for flash-attn's cache_batch_idx, when rows are shuffled
    k_new: Any | None  # (batch, append, heads_kv, d)
    v_new: Any | None

    def view(self) -> CacheView:
        owned = set(self.rows)
        spare = [i for i in range(self.k.shape[0]) if i not in owned]
        return CacheView(lambda i: self.k[self.rows[i]], lambda i: self.v[self.rows[i]],
                         lambda: [t[spare] for t in (self.k, self.v)] if spare else [])


def dense_cache(case: AttnCase, k: Any, v: Any, seed: int = 0) -> DenseCache:
    """A dense cache for ``case`` from its packed ``k`` and ``v``."""
    import torch

    cache = cache_of(case)
    rows_total = cache.slots or case.batch
    if cache.slots:
        gen = torch.Generator(device="cpu").manual_seed(seed)
        rows = torch.randperm(rows_total, generator=gen)[: case.batch].tolist()
    else:
        rows = list(range(case.batch))
    cached = cache.cached(case.seqlens_k)
    out = []
    for t in (k, v):
        full = torch.full((rows_total, cache.capacity, *t.shape[1:]), POISON, dtype=t.dtype, device=t.device)
        for i, piece in enumerate(per_request(case, t)):
            full[rows[i], : cached[i]] = piece[: cached[i]]
        out.append(full)
    news: list[Any] = [None, None]
    if cache.append:
        news = [torch.stack([p[cached[i]:] for i, p in enumerate(per_request(case, t))]) for t in (k, v)]
    batch_idx = torch.tensor(rows, dtype=torch.int32, device=k.device) if cache.slots else None
    return DenseCache(out[0], out[1], torch.tensor(cached, dtype=torch.int32, device=k.device), rows, batch_idx,
                      news[0], news[1])


@dataclass
class PagedCache:
    k: Any  # (pages, page, heads_kv, d)
    v: Any
    page: int
    table: Any  # int32 (batch, max pages per request): flash-attn's block_table
    indptr: Any  # int32 (batch + 1,): FlashInfer's page ranges per request
    indices: Any  # int32: the pages of every request in order
    last_page_len: Any  # int32 (batch,): keys in each request's last page, after the call
    pages_of: list[list[int]]  # request -> its pages in order

    def view(self) -> CacheView:
        owned = {p for pages in self.pages_of for p in pages}
        spare = [p for p in range(self.k.shape[0]) if p not in owned]

        def logical(t: Any, i: int) -> Any:
            return t[self.pages_of[i]].reshape(-1, *t.shape[2:])

        return CacheView(lambda i: logical(self.k, i), lambda i: logical(self.v, i),
                         lambda: [t[spare] for t in (self.k, self.v)] if spare else [])


def paged_cache(case: AttnCase, k: Any, v: Any, page: int, seed: int = 0, spare_pages: int = 2) -> PagedCache:
    """A paged cache for ``case``: each request gets the pages its keys after the call need, taken in a
    shuffled order from a pool with ``spare_pages`` more that nobody owns."""
    import torch

    cache = cache_of(case)
    cached = cache.cached(case.seqlens_k)
    counts = [-(-n // page) for n in case.seqlens_k]
    pool = sum(counts) + spare_pages
    gen = torch.Generator(device="cpu").manual_seed(seed)
    order = torch.randperm(pool, generator=gen).tolist()
    pages_of, start = [], 0
    for c in counts:
        pages_of.append(order[start : start + c])
        start += c
    out = []
    for t in (k, v):
        pages = torch.full((pool, page, *t.shape[1:]), POISON, dtype=t.dtype, device=t.device)
        for i, piece in enumerate(per_request(case, t)):
            flat = pages[pages_of[i]].reshape(-1, *t.shape[1:])
            flat[: cached[i]] = piece[: cached[i]]
            pages[pages_of[i]] = flat.view(len(pages_of[i]), page, *t.shape[1:])
        out.append(pages)
    width = max(counts)
    table = torch.tensor([p + [p[0]] * (width - len(p)) for p in pages_of], dtype=torch.int32, device=k.device)
    indptr = torch.tensor([0, *torch.tensor(counts).cumsum(0).tolist()], dtype=torch.int32, device=k.device)
    indices = torch.tensor([p for pages in pages_of for p in pages], dtype=torch.int32, device=k.device)
    last = torch.tensor([n - page * (c - 1) for n, c in zip(case.seqlens_k, counts, strict=True)], dtype=torch.int32,
                        device=k.device)
    return PagedCache(out[0], out[1], page, table, indptr, indices, last, pages_of)


def cache_bytes(case: AttnCase, page: int | None = None) -> int:
    """Device memory of the cache a back end builds for ``case`` (dense rows, or whole pages)."""
    cache = cache_of(case)
    per_key = case.heads_kv * (case.head_dim_qk + case.head_dim_v) * case.elem_bytes
    if page is None:
        return (cache.slots or case.batch) * cache.capacity * per_key
    return (sum(-(-n // page) for n in case.seqlens_k) + 2) * page * per_key


def new_tokens(case: AttnCase, inputs: Inputs) -> tuple[Any, Any] | None:
    """The appended keys and values as ``(batch, append, heads_kv, d)``: each request's last packed keys."""
    import torch

    append = case.cache.append if case.cache is not None else 0
    if not append:
        return None
    return tuple(torch.stack([p[-append:] for p in per_request(case, t)]) for t in (inputs.k, inputs.v))  # type: ignore[return-value]
