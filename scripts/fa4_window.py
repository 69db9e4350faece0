"""FlashAttention-4's window convention, on the fuzzer's finding (``fa4 gives a wrong result on 1 x sq=2 sk=2,
1q/1kv heads, d=16, fp16, mask=win0--1, fwd``): FA2 spells an unbounded window side -1, FA4 spells it None.

    python scripts/fa4_window.py      # on a GPU with flash-attn-4 (and, for the control, flash-attn 2)

For the example's tensors it prints, per row, FA4's error against an fp64 reference with ``window_size=(0, -1)``
(what pytest-attn's adapter passed before it spelled the side FA4's way) and ``(0, None)``, FA2's with ``(0, -1)``,
and what FA4's own ``_resolve_causal_local_window`` makes of both spellings.
"""

from __future__ import annotations

import torch


def reference(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, left: int | None, right: int | None) -> torch.Tensor:
    """fp64 attention of one sequence ``(s, 1, d)``, bottom-right aligned; None = an unbounded side."""
    sq, sk = q.shape[0], k.shape[0]
    scores = (q[:, 0].double() @ k[:, 0].double().T) * q.shape[-1] ** -0.5
    i = torch.arange(sq, device=q.device)[:, None] + sk - sq
    j = torch.arange(sk, device=q.device)[None, :]
    visible = torch.ones(sq, sk, dtype=torch.bool, device=q.device)
    if left is not None:
        visible &= j >= i - left
    if right is not None:
        visible &= j <= i + right
    probs = torch.softmax(scores.masked_fill(~visible, float("-inf")), -1).nan_to_num(0.0)
    return (probs @ v[:, 0].double())[:, None]


def main() -> None:
    from flash_attn.cute import flash_attn_func as fa4
    from flash_attn.cute import interface

    torch.manual_seed(0)
    q, k, v = (torch.randn(1, 2, 1, 16, device="cuda", dtype=torch.float16) for _ in range(3))
    truth = reference(q[0], k[0], v[0], 0, None)  # keys j >= i: row 0 sees both keys, row 1 sees key 1
    print("fp64 reference, window left 0, right unbounded: rows see keys", "[0, 1]", "and [1]")
    for spelling in ((0, -1), (0, None)):
        resolved = interface._resolve_causal_local_window(False, *spelling)
        out = fa4(q, k, v, window_size=spelling)
        out = out[0] if isinstance(out, tuple) else out
        errors = (out[0].double() - truth).abs().amax(dim=(1, 2)).tolist()
        print(f"FA4 window_size={spelling}: resolved (causal, local, left, right) = {resolved}; max |error| per row"
              f" {', '.join(f'{e:.4g}' for e in errors)}")
    try:
        from flash_attn import flash_attn_func as fa2
    except ImportError:
        print("FA2 not installed: no control")
        return
    out = fa2(q, k, v, window_size=(0, -1))
    errors = (out[0].double() - truth).abs().amax(dim=(1, 2)).tolist()
    print(f"FA2 window_size=(0, -1): max |error| per row {', '.join(f'{e:.4g}' for e in errors)}")


if __name__ == "__main__":
    main()
