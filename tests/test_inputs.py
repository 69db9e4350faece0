"""Inputs per layout (pytest_attn.engine.inputs), on the CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_attn.core.case import AttnCase, Mask  # noqa: E402
from pytest_attn.engine.inputs import make_inputs  # noqa: E402


def case(backend, sq=8, sk=8, mask=Mask.none(), *, hq=4, hkv=4, dtype="fp32", direction="fwd", batch=2):
    return AttnCase.dense(backend=backend, shape="t", batch=batch, seqlen_q=sq, seqlen_k=sk, heads_q=hq,
                          heads_kv=hkv, head_dim=16, dtype=dtype, mask=mask, direction=direction)


def test_same_seed_same_values_in_every_layout():
    c = case("x", hq=4, hkv=2, direction="fwd+bwd")
    bhsd, bshd, thd = (make_inputs(c, layout, "cpu", seed=7) for layout in ("bhsd", "bshd", "thd"))
    assert bhsd.q.shape == (2, 4, 8, 16) and bhsd.q.is_contiguous()
    assert torch.equal(bhsd.k.transpose(1, 2).reshape(-1, 2, 16), thd.k)
    assert torch.equal(bshd.grad_out.reshape(-1, 4, 16), thd.grad_out)
    assert not torch.equal(make_inputs(c, "thd", "cpu", seed=8).q, thd.q)
