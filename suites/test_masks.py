"""The custom-mask slow path: one logical mask, every way to express it.

Each problem (shape + logical mask) runs on every back end that can express the mask: flags
(flash-attn ``causal=True``, FlashInfer ``causal``/``window_left``, SDPA ``is_causal``), a dense
custom mask (``flashinfer-custom``, packed inside each call as user code does), packed bits
(``flashinfer-packed``), block-sparse tiles (``flashinfer-bsr``), a flex block mask, and SDPA's
efficient kernel with an explicit ``attn_mask`` (``sdpa-efficient-mask``). Every expression must
match the fp64 reference of the *same* mask on the same rows before it is timed, so they all give
the same output; the summary then says how much slower each is than the fastest:
"custom mask: N x slower than causal=True for the same mask". The ``all-true`` mask is the case
from the field: users pass an all-True mask when they mean none.
"""

from __future__ import annotations

import pytest

from pytest_attn.plugin import attn_cases


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "case" in metafunc.fixturenames:
        cases = attn_cases(metafunc.config, "masks")
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_mask_expression(attn_bench, case):
    attn_bench(case)
