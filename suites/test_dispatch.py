"""Kernel dispatch: which GPU kernels a call launches, pinned where users have been surprised.

* flash-attn decode (batch 1, Qwen2.5-7B heads 28/4, head dim 128, bf16, ``flash_attn_with_kvcache``
  with its split-KV heuristic): one ``flash_fwd_kernel`` with up to 100 cached keys; from 200 keys
  up, ``flash_fwd_splitkv_kernel`` plus ``flash_fwd_splitkv_combine_kernel`` (seen on an H200 with
  flash-attn 2.8.3). ``num_splits=1`` never runs the combine kernel.
* FlashInfer on sm90: the same prefill call with a custom mask runs a different kernel from the
  call with ``causal=True`` (the custom mask leaves the Hopper kernels).

Kernel names come from the PyTorch profiler on one warm call, after the output has been checked
against the reference; nothing here is timed. Every benchmark also records its kernels in
``extra_info["kernels"]``, and ``@pytest.mark.attn_kernels(must=..., must_not=...)`` asserts them.
"""

from __future__ import annotations

import pytest

from pytest_attn.core.case import Mask
from pytest_attn.core.catalog import QWEN25_7B, VIDEO_8K, decode_shape
from pytest_attn.core.kernel_names import check_kernels

SPLIT = ("flash_fwd_splitkv_kernel", "flash_fwd_splitkv_combine_kernel")


def _decode(backend: str, keys: int):
    return decode_shape(QWEN25_7B, keys).case(backend, "bf16", Mask.causal(), "fwd")


@pytest.mark.parametrize("keys", [64, 100])
def test_flash_attn_short_cache_runs_one_kernel(attn_kernels, keys):
    names = [k.name for k in attn_kernels(_decode("flash-attn-kvcache", keys))]
    problem = check_kernels(names, must=["flash_fwd_kernel"], must_not=SPLIT)
    assert problem is None, problem


@pytest.mark.parametrize("keys", [200, 256, 4096, 32768])
def test_flash_attn_longer_cache_splits_kv(attn_kernels, keys):
    names = [k.name for k in attn_kernels(_decode("flash-attn-kvcache", keys))]
    problem = check_kernels(names, must=SPLIT, must_not=["flash_fwd_kernel"])
    assert problem is None, problem


def test_flash_attn_num_splits_1_never_combines(attn_kernels):
    names = [k.name for k in attn_kernels(_decode("flash-attn-kvcache-split1", 32768))]
    problem = check_kernels(names, must_not=["flash_fwd_splitkv_combine_kernel"])
    assert problem is None, problem


def test_flashinfer_custom_mask_leaves_the_flag_kernel(attn_kernels, attn_device):
    if attn_device.compute_capability != (9, 0):
        pytest.skip(f"pinned on sm90; this device is {attn_device.describe()}")
    flag = {k.full for k in attn_kernels(VIDEO_8K.case("flashinfer-single", "bf16", Mask.causal(), "fwd"))}
    custom = {k.full for k in attn_kernels(VIDEO_8K.case("flashinfer-packed", "bf16", Mask.causal(), "fwd"))}
    assert flag and custom
    assert flag.isdisjoint(custom), f"the same kernels ran with and without a custom mask: {sorted(flag)}"
