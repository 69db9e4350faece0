"""SDPA's memory-efficient kernel with a causal bool ``attn_mask`` against its flash kernel with ``is_causal``, on a
GPU: where the mask has more than 2^32 elements the efficient kernel reads rows past 2^32 / S from wrapped addresses
(pytorch/pytorch#187227). Prints, per length, the largest difference and the first row that differs by over 0.02.

    python scripts/probe_efficient_mask.py                    # 2 heads at 40,000-52,000 tokens: all right
    python scripts/probe_efficient_mask.py 80000,111856 1     # wrong from row 2^32 / S on

Measured: docs/gpu-validation.md#back-ends-and-kernels.
"""

from __future__ import annotations

import sys

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel


def probe(length: int, heads: int) -> str:
    q, k, v = (torch.randn(1, heads, length, 128, device="cuda", dtype=torch.bfloat16) for _ in range(3))
    mask = torch.ones(length, length, dtype=torch.bool, device="cuda").tril_()
    with sdpa_kernel(SDPBackend.EFFICIENT_ATTENTION):
        masked = F.scaled_dot_product_attention(q, k, v, attn_mask=mask)
    with sdpa_kernel(SDPBackend.FLASH_ATTENTION):
        causal = F.scaled_dot_product_attention(q, k, v, is_causal=True)
    diff = (masked.float() - causal.float()).abs()
    bad = (diff.amax(dim=(0, 1, 3)) > 0.02).nonzero()
    first = bad[0].item() if len(bad) else None
    return (f"H={heads} S={length} mask elements {length * length:.3e} over 2^32: {length * length > 2**32}  max diff"
            f" {diff.max().item():.4f}  first bad row {first} (2^32/S = {2**32 / length:.0f})")


def main(argv: list[str]) -> None:
    lengths = [int(x) for x in argv[0].split(",")] if argv else [40_000, 46_000, 46_400, 52_000]
    heads = int(argv[1]) if len(argv) > 1 else 2
    torch.manual_seed(0)
    for length in lengths:
        print(probe(length, heads), flush=True)
        torch.cuda.empty_cache()


if __name__ == "__main__":
    main(sys.argv[1:])
