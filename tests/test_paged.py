"""Paged KV caches as serving engines hold them (pytest_attn.backends.paged), on CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_attn.backends.paged import paged_cache, paged_kv  # noqa: E402


def test_paged_caches_hold_every_key_in_order():
    k = torch.randn(2, 10, 3, 4)
    v = torch.randn(2, 10, 3, 4)
    kp, vp, table = paged_cache(k, v, 4)
    assert kp.shape == (6, 4, 3, 4) and table.shape == (2, 3) and table.dtype == torch.int32
    assert sorted(table.flatten().tolist()) == list(range(6)) and table.flatten().tolist() != list(range(6))
    assert torch.equal(kp[table.long()].reshape(2, 12, 3, 4)[:, :10], k)
    assert torch.equal(vp[table.long()].reshape(2, 12, 3, 4)[:, :10], v)

    seqlens = (5, 1, 9)
    kt, vt = torch.randn(15, 2, 4), torch.randn(15, 2, 4)
    kp, vp, indptr, indices, last = paged_kv(kt, vt, seqlens, 4)
    assert indptr.tolist() == [0, 2, 3, 6] and last.tolist() == [1, 1, 1]
    got = []
    for i, n in enumerate(seqlens):
        pages = indices[indptr[i] : indptr[i + 1]].long()
        got.append(kp[pages].reshape(-1, 2, 4)[:n])
    assert torch.equal(torch.cat(got), kt)
