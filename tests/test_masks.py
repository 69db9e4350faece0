"""Mask builders (pytest_attn.core.masks), the dense form and its torch twin
(pytest_attn.core.mask_tensors), all on CPU."""

from __future__ import annotations

import numpy as np
import pytest

from pytest_attn.core import flops, mask_tensors, masks
from pytest_attn.core.case import AttnCase, CaseError, Mask
from pytest_attn.core.masks import dense_mask_np

torch = pytest.importorskip("torch")


def test_causal_alignments_differ_only_when_lengths_differ():
    br, tl = masks.causal(), masks.causal("top-left")
    assert np.array_equal(dense_mask_np(br, 4, 4), dense_mask_np(tl, 4, 4))
    # 2 queries, 4 keys: bottom-right lets query 0 see keys 0..2, top-left only key 0
    assert dense_mask_np(br, 2, 4).tolist() == [[True, True, True, False], [True, True, True, True]]
    assert dense_mask_np(tl, 2, 4).tolist() == [[True, False, False, False], [True, True, False, False]]
    with pytest.raises(CaseError, match="alignment='middle' is not one of bottom-right, top-left"):
        masks.causal("middle")


def test_document_mask_is_block_diagonal():
    doc = masks.document((2, 3))
    expected = np.zeros((5, 5), bool)
    expected[:2, :2] = True
    expected[2:, 2:] = True
    assert np.array_equal(dense_mask_np(doc, 5, 5), expected)
    causal_doc = dense_mask_np(masks.document((2, 3), causal=True), 5, 5)
    assert np.array_equal(causal_doc, expected & np.tril(np.ones((5, 5), bool)))
    assert doc.id == "doc2-3" and masks.document((1,) * 9).id.startswith("doc9x")
    with pytest.raises(CaseError, match="document mask over 5 tokens applied to seqlen_q=6"):
        dense_mask_np(doc, 6, 6)
    with pytest.raises(CaseError, match="must be one or more positive ints"):
        masks.document((2, 0))


def test_prefix_lm_and_all_true():
    m = dense_mask_np(masks.prefix_lm(2), 4, 4)
    assert m.tolist() == [[True, True, False, False], [True, True, False, False],
                          [True, True, True, False], [True, True, True, True]]
    assert dense_mask_np(masks.all_true(), 3, 5).all()
    case = AttnCase.dense(backend="x", shape="s", batch=1, seqlen_q=3, heads_q=1, head_dim=8, mask=masks.all_true())
    assert masks.is_full(case) and masks.effective_mask(case) == Mask.none() and masks.flag_form(case) == (-1, -1)


def test_random_block_sparse_is_seeded_whole_tiles_and_never_leaves_a_row_empty():
    m = masks.random_block_sparse(4, 0.3, seed=1)
    a = dense_mask_np(m, 18, 16)
    assert np.array_equal(a, dense_mask_np(masks.random_block_sparse(4, 0.3, seed=1), 18, 16))
    assert not np.array_equal(a, dense_mask_np(masks.random_block_sparse(4, 0.3, seed=2), 18, 16))
    assert a.any(axis=1).all()
    tiles = np.pad(a, ((0, 2), (0, 0))).reshape(5, 4, 4, 4)
    assert all(t.all() or not t.any() for t in tiles[:4].transpose(0, 2, 1, 3).reshape(-1, 4, 4))
    assert m.id == "blocksparse4-d30-s1"
    with pytest.raises(CaseError, match="density=0 must be in"):
        masks.random_block_sparse(4, 0)


def test_flag_form():
    def c(mask, sq=4, sk=4):
        return AttnCase.dense(backend="x", shape="s", batch=1, seqlen_q=sq, seqlen_k=sk, heads_q=1, head_dim=8,
                              mask=mask)
    assert masks.flag_form(c(Mask.causal())) == (-1, 0)
    assert masks.flag_form(c(Mask.causal(), 1, 8)) == (-1, -1)  # one query sees every key
    assert masks.flag_form(c(Mask.window(2, 0))) == (2, 0)
    assert masks.flag_form(c(masks.document((2, 2)))) is None


BUILDERS = [Mask.none(), Mask.causal(), Mask.window(3, 1), masks.causal("top-left"), masks.prefix_lm(3),
            masks.random_block_sparse(4, 0.5), masks.all_true()]


@pytest.mark.parametrize("mask", BUILDERS, ids=lambda m: m.id)
@pytest.mark.parametrize(("sq", "sk"), [(7, 7), (3, 9), (1, 16)])
def test_torch_dense_mask_rows_and_counts_agree_with_numpy(mask, sq, sk):
    dense = dense_mask_np(mask, sq, sk)
    assert torch.equal(mask_tensors.dense_mask(mask, sq, sk), torch.from_numpy(dense))
    rows = torch.tensor([0, sq - 1])
    assert torch.equal(mask_tensors.dense_mask(mask, sq, sk, rows=rows), torch.from_numpy(dense[[0, sq - 1]]))
    assert list(flops.visible_keys_per_row(sq, sk, mask)) == list(dense.sum(axis=1))


def test_custom_mask_names_have_no_spaces_and_rows_are_checked():
    with pytest.raises(CaseError, match="must have no spaces"):
        Mask.custom("my mask", lambda sq, sk: np.ones((sq, sk), bool))
    bad = Mask.custom("bad-rows", rows_fn=lambda sq, sk, r: np.ones((len(r) + 1, sk), bool))
    with pytest.raises(CaseError, match="'bad-rows' returned rows of shape"):
        bad.rows(4, 4, np.arange(2))
