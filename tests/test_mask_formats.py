"""Converters from the dense mask to each library's format (pytest_attn.core.mask_formats) and the
device-side packer (pytest_attn.core.mask_tensors.pack_bits_torch), on CPU."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pytest_attn.core import masks
from pytest_attn.core.case import Mask
from pytest_attn.core.mask_formats import bsr_block_width, from_bsr, pack_bits, to_bsr, unpack_bits
from pytest_attn.core.mask_tensors import pack_bits_torch
from pytest_attn.core.masks import dense_mask_np

torch = pytest.importorskip("torch")


@settings(max_examples=60, deadline=None)
@given(sq=st.integers(1, 40), sk=st.integers(1, 40), seed=st.integers(0, 3))
def test_packed_bits_round_trip_in_little_order(sq, sk, seed):
    dense = np.random.default_rng(seed).random((sq, sk)) < 0.5
    packed = pack_bits(dense)
    assert packed.dtype == np.uint8 and packed.shape == (-(-sq * sk // 8),)
    assert np.array_equal(unpack_bits(packed, sq, sk), dense)
    assert torch.equal(_pack_torch(dense, chunk=16), torch.from_numpy(packed))


def _pack_torch(dense, chunk):
    return pack_bits_torch(torch.from_numpy(dense), chunk_bytes=chunk)


def test_little_bit_order_is_what_flashinfer_reads():
    # pairs 0 and 3 visible -> bits 0 and 3 -> 0b00001001 = 9; big order (flashinfer.packbits'
    # default) would give 0b10010000 = 144: the silent wrong-output trap
    dense = np.array([[True, False, False, True, False, False, False, False]])
    assert pack_bits(dense).tolist() == [9]
    assert np.packbits(dense.reshape(-1)).tolist() == [144]


@pytest.mark.parametrize("mask", [Mask.causal(), masks.random_block_sparse(4, 0.4), masks.document((5, 7))],
                         ids=lambda m: m.id)
def test_bsr_round_trip_and_exactness(mask):
    dense = dense_mask_np(mask, 12, 12)
    bsr = to_bsr(dense, 4, 4)
    assert np.array_equal(from_bsr(bsr), dense)
    assert bsr.indptr[-1] == bsr.nnz
    if mask.kind == "causal":  # diagonal tiles are partial: they carry a per-pair mask
        assert not bsr.exact and bsr.tile_masks is not None and bsr.partial_tiles == 3 and bsr.nnz == 6
    if mask.id.startswith("blocksparse"):  # tile-aligned: no per-pair mask needed
        assert bsr.exact and bsr.tile_masks is None


def test_bsr_with_a_short_last_row_of_tiles():
    dense = dense_mask_np(Mask.none(), 10, 8)
    bsr = to_bsr(dense, 4, 4)
    assert bsr.exact and bsr.indptr.tolist() == [0, 2, 4, 6]
    assert np.array_equal(from_bsr(bsr), dense)
    with pytest.raises(ValueError, match="seqlen_k=10 is not a multiple of the tile width C=4"):
        to_bsr(dense_mask_np(Mask.none(), 4, 10), 4, 4)


def test_bsr_block_width():
    assert bsr_block_width(8192) == 128
    assert bsr_block_width(96) == 32
    assert bsr_block_width(111_856, 128, 64) is None  # 111,856 = 16 x 6,991
    assert bsr_block_width(111_856, 128, 16) == 16
