"""Keyword arguments matched against an installed library's signature (pytest_attn.backends.signature)."""

from __future__ import annotations

import pytest

from pytest_attn.backends.base import Unsupported
from pytest_attn.backends.signature import matched_kwargs


def test_keywords_follow_the_installed_signature():
    def fa3_like(q, k, v, softmax_scale=None, causal=False, window_size=(-1, -1)):  # no dropout_p
        return q

    assert matched_kwargs(fa3_like, {"softmax_scale": 0.1, "causal": True}) == {"softmax_scale": 0.1,
                                                                                "causal": True}

    def old(q, k, v, softmax_scale=None, causal=False):  # flash-attn < 2.3: no window_size
        return q

    defaults = {"window_size": (-1, -1)}
    assert matched_kwargs(old, {"causal": True, "window_size": (-1, -1)}, droppable=defaults) == {"causal": True}
    with pytest.raises(Unsupported, match="old of this build takes no window_size= argument"):
        matched_kwargs(old, {"window_size": (4, 0)}, droppable=defaults)
    assert matched_kwargs(old, {"extra": 1}, droppable={"extra": ...}) == {}  # optional whatever its value

    def renamed(q, data_type=None):
        return q

    assert matched_kwargs(renamed, {"q_data_type": "bf16"}, renames={"q_data_type": ("data_type",)}) == {
        "data_type": "bf16"}
    with pytest.raises(Unsupported, match="takes no q_data_type= argument; upgrade it"):
        matched_kwargs(old, {"q_data_type": "bf16"}, upgrade="upgrade it")
    assert matched_kwargs(min, {"anything": 1}) == {"anything": 1}  # no readable signature: pass everything
