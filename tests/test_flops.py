"""The FLOP/byte model against hand-computed values."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pytest_attn.core import flops
from pytest_attn.core.case import AttnCase, Mask
from pytest_attn.core.masks import dense_mask_np


def case(sq, sk, mask=Mask.none(), *, batch=1, hq=2, hkv=2, d=8, dv=None, dtype="bf16", direction="fwd"):
    return AttnCase.dense(backend="t", shape="s", batch=batch, seqlen_q=sq, seqlen_k=sk, heads_q=hq, heads_kv=hkv,
                          head_dim=d, head_dim_v=dv, dtype=dtype, mask=mask, direction=direction)


def test_full_attention_counts_every_pair():
    # 4x4 pairs, 2 heads, 2*(8+8) FLOPs per pair per head
    assert flops.flops(case(4, 4)) == 2 * 16 * 2 * 16 == 1024


def test_causal_is_bottom_right_when_sq_lt_sk():
    # sq=2, sk=5: row 0 sees keys 0..3 (4), row 1 sees 0..4 (5)
    assert list(flops.visible_keys_per_row(2, 5, Mask.causal())) == [4, 5]
    assert flops.visible_pairs(2, 5, Mask.causal()) == 9


def test_causal_with_sq_gt_sk_has_empty_rows():
    # sq=5, sk=2: row i sees keys j <= i - 3
    assert list(flops.visible_keys_per_row(5, 2, Mask.causal())) == [0, 0, 0, 1, 2]


def test_square_causal_is_triangle():
    assert flops.visible_pairs(1024, 1024, Mask.causal()) == 1024 * 1025 // 2


def test_sliding_windows():
    assert list(flops.visible_keys_per_row(4, 4, Mask.window(1, 0))) == [1, 2, 2, 2]
    assert list(flops.visible_keys_per_row(5, 5, Mask.window(2, 1))) == [2, 3, 4, 4, 3]
    # right-only window (left unbounded) equals causal shifted by 1
    assert list(flops.visible_keys_per_row(3, 3, Mask.window(-1, 1))) == [2, 3, 3]


def test_custom_mask_counts_true_entries():
    eye = Mask.custom("diag", lambda sq, sk: np.eye(sq, sk, dtype=bool))
    assert flops.visible_pairs(3, 3, eye) == 3
    bad = Mask.custom("bad", lambda sq, sk: np.ones((sq + 1, sk), dtype=bool))
    with pytest.raises(ValueError, match=r"'bad' returned shape \(4, 3\), expected \(3, 3\)"):
        flops.visible_pairs(3, 3, bad)


def test_varlen_sums_over_sequences():
    c = AttnCase("varlen", "docs", (3, 5), (3, 5), 2, 2, 8, 8, mask=Mask.causal())
    assert flops.work(c).visible_pairs == 6 + 15
    assert flops.flops(c) == 2 * 16 * 2 * 21


def test_gqa_changes_bytes_not_flops():
    mha, gqa = case(8, 8, hq=8, hkv=8), case(8, 8, hq=8, hkv=2)
    assert flops.flops(mha) == flops.flops(gqa)
    # bf16: q and o 8*8*8*2 bytes each; k and v 8*hkv*8*2
    assert flops.min_bytes(mha) == 4 * 1024
    assert flops.min_bytes(gqa) == 2 * 1024 + 2 * 256


def test_backward_is_two_and_a_half_forward():
    fwd = flops.flops(case(16, 16, Mask.causal()))
    assert flops.flops(case(16, 16, Mask.causal(), direction="fwd+bwd")) == round(3.5 * fwd)


def test_bytes_with_backward_and_mask():
    c = case(4, 4, dtype="fp32", direction="fwd+bwd", hq=1, hkv=1, d=2)
    per_tensor = 4 * 1 * 2 * 4  # 4 tokens, 1 head, d=2, 4 bytes
    # fwd: q k v o; bwd: q k v o dO + dq dk dv
    assert flops.min_bytes(c) == 4 * per_tensor + 8 * per_tensor
    # an all-True mask costs nothing (the minimal call passes none); a real one, one bit per pair
    m = case(4, 4, Mask.custom("all", lambda sq, sk: np.ones((sq, sk), bool)), dtype="fp32", hq=1, hkv=1, d=2)
    assert flops.min_bytes(m) == 4 * per_tensor
    eye = case(4, 4, Mask.custom("eye", lambda sq, sk: np.eye(sq, sk, dtype=bool)), dtype="fp32", hq=1, hkv=1, d=2)
    assert flops.min_bytes(eye) == 4 * per_tensor + 2  # 16 pairs -> 2 bytes of bits


def test_fa2_convention_halves_causal_and_ignores_offsets():
    hunyuan = case(111_856, 111_856, hq=24, hkv=24, d=128)
    assert flops.fa2_flops(hunyuan) == 4 * 111_856**2 * 24 * 128 == flops.flops(hunyuan)
    cross = case(2, 5, Mask.causal())
    assert flops.fa2_flops(cross) == 2 * 16 * 2 * 10 // 2  # 10 pairs halved: 5
    assert flops.flops(cross) == 2 * 16 * 2 * 9  # exact count: 9 pairs


def test_work_summary():
    w = flops.work(case(4, 4, Mask.causal()))
    assert w.convention == "exact-mask"
    assert w.density == pytest.approx(10 / 16)
    assert w.arithmetic_intensity == pytest.approx(w.flops / w.min_bytes)


@given(
    sq=st.integers(1, 40), sk=st.integers(1, 40),
    left=st.integers(-1, 45), right=st.integers(-1, 45),
)
def test_row_counts_match_the_dense_mask(sq, sk, left, right):
    mask = Mask.window(left, right)
    assert list(flops.visible_keys_per_row(sq, sk, mask)) == list(dense_mask_np(mask, sq, sk).sum(axis=1))


def test_only_the_keys_some_query_sees_are_read():
    # GPT-OSS's window decode: one query, a 128-token window (127 left) over 8,192 cached keys
    win = Mask.window(127, 0)
    assert flops.keys_read(1, 8192, win) == 128
    assert flops.keys_read(4, 100, Mask.window(10, 0)) == 14  # rows at keys 96..99 see 86..99
    assert flops.keys_read(1000, 1000, Mask.window(100, 0)) == 1000
    assert flops.keys_read(2, 5, Mask.causal()) == 5 and flops.keys_read(5, 2, Mask.causal()) == 2
    assert flops.keys_read(1, 5, Mask.none()) == 5
    assert flops.keys_read(2, 10, Mask.window(0, 0)) == 2 and flops.keys_read(3, 1, Mask.causal()) == 1
    cols = Mask.custom("two-columns", lambda sq, sk: np.arange(sk)[None, :].repeat(sq, 0) % 4 == 0)
    assert flops.keys_read(3, 8, cols) == 2
    decode = case(1, 8192, win, hq=64, hkv=8, d=64)
    # q and o: 64 heads x 64 x 2 bytes each; k and v: 128 keys (not 8,192) x 8 heads x 64 x 2 bytes each
    assert flops.min_bytes(decode) == 2 * 64 * 64 * 2 + 2 * 128 * 8 * 64 * 2
    assert flops.tensor_bytes(decode) == 2 * 64 * 64 * 2 + 2 * 8192 * 8 * 64 * 2  # what is allocated
