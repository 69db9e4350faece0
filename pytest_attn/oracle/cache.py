"""The check of a KV cache after an appending call: each request's row (or pages, read in its order)
holds exactly the request's own keys and values -- the cached ones where they were, the new ones at the
request's cache length -- and every other position, row and page still holds the poison it was built
with: nothing written to the wrong request, the wrong position or past the end. Exact: the kernels copy.
"""

from __future__ import annotations

from typing import Any

from ..core.case import AttnCase
from ..core.layouts import POISON, CacheView, cache_of, per_request


def check_cache(case: AttnCase, k: Any, v: Any, view: CacheView) -> str | None:
    """None when the cache after one call is what it must be; else the first wrong place, named."""
    import torch

    cached = cache_of(case).cached(case.seqlens_k)
    for name, packed, read in (("key", k, view.keys), ("value", v, view.values)):
        for i, own in enumerate(per_request(case, packed)):
            row = read(i)
            n = own.shape[0]
            if row.shape[0] < n:
                return f"request {i}'s cache holds {row.shape[0]} positions, under its {n} keys"
            wrong = (row[:n] != own).flatten(1).any(1).nonzero()
            if len(wrong):
                p = int(wrong[0])
                what = "an appended" if p >= cached[i] else "a cached"
                return (f"request {i}: cache position {p} ({what} {name}; the request holds {cached[i]} cached and"
                        f" {n - cached[i]} appended) is not the request's own {name} {p}")
            beyond = (row[n:] != POISON).flatten(1).any(1).nonzero()
            if len(beyond):
                return f"request {i}: cache position {n + int(beyond[0])}, past its {n} keys, was written"
    for part in view.spare():
        if bool((part != POISON).any()):
            return "a cache row or page that no request owns was written"
    del torch
    return None
