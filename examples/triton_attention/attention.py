"""A small FlashAttention-style forward kernel of our own, in Triton, held against the others by
pytest-attn -- and a pure-PyTorch chunked fallback with the same algorithm for machines without a GPU.

Both: tiles of keys, online softmax (running max and sum in fp32), causal aligned bottom-right (query
i sees keys j <= i + sk - sq, as flash-attn), GQA by mapping query head h to key/value head
h // (heads_q // heads_kv). Layout (batch, heads, seqlen, head_dim).
"""

from __future__ import annotations

import math
from typing import Any

import torch

try:  # Triton is optional: without it (or without a GPU) the fallback runs
    import triton
    import triton.language as tl
except ImportError:  # pragma: no cover - depends on the machine
    triton = None


def attention_fallback(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, scale: float,
                       block: int = 64) -> torch.Tensor:
    """The kernel's algorithm in PyTorch: key tiles of ``block``, online softmax in fp32."""
    b, hq, sq, _ = q.shape
    hk, sk = k.shape[1], k.shape[2]
    group = hq // hk
    kk = k.repeat_interleave(group, dim=1).float()
    vv = v.repeat_interleave(group, dim=1).float()
    qf = q.float() * scale
    m = torch.full((b, hq, sq, 1), float("-inf"), device=q.device)
    s = torch.zeros((b, hq, sq, 1), device=q.device)
    acc = torch.zeros((b, hq, sq, v.shape[-1]), device=q.device)
    rows = torch.arange(sq, device=q.device)[:, None] + (sk - sq)
    for start in range(0, sk, block):
        scores = qf @ kk[:, :, start : start + block].transpose(-1, -2)
        if causal:
            cols = torch.arange(start, min(sk, start + block), device=q.device)[None, :]
            scores = scores.masked_fill(cols > rows, float("-inf"))
        m_new = torch.maximum(m, scores.amax(dim=-1, keepdim=True))
        safe = torch.where(torch.isinf(m_new), torch.zeros_like(m_new), m_new)
        p = torch.exp(scores - safe)
        correction = torch.exp(torch.where(torch.isinf(m), torch.full_like(m, float("-inf")), m) - safe)
        s = s * correction + p.sum(dim=-1, keepdim=True)
        acc = acc * correction + p @ vv[:, :, start : start + block]
        m = m_new
    out = torch.where(s > 0, acc / s.clamp_min(1e-30), torch.zeros_like(acc))  # no visible key: 0
    return out.to(q.dtype)


if triton is not None:

    @triton.jit
    def _fwd_kernel(Q, K, V, Out, scale, sq, sk, group, H,
                    sqb, sqh, sqs, skb, skh, sks, svb, svh, svs, sob, soh, sos,
                    D: tl.constexpr, BLOCK_M: tl.constexpr, BLOCK_N: tl.constexpr,
                    CAUSAL: tl.constexpr):
        pid_m = tl.program_id(0)
        bh = tl.program_id(1)
        b = bh // H
        h = bh % H
        hk = h // group
        offs_m = pid_m * BLOCK_M + tl.arange(0, BLOCK_M)
        offs_d = tl.arange(0, D)
        q = tl.load(Q + b * sqb + h * sqh + offs_m[:, None] * sqs + offs_d[None, :], mask=offs_m[:, None] < sq,
                    other=0.0)
        m_i = tl.full([BLOCK_M], float("-inf"), tl.float32)
        l_i = tl.zeros([BLOCK_M], tl.float32)
        acc = tl.zeros([BLOCK_M, D], tl.float32)
        diag = offs_m + (sk - sq)
        end = sk
        if CAUSAL:
            end = tl.minimum(sk, (pid_m + 1) * BLOCK_M + (sk - sq))
        for start in range(0, end, BLOCK_N):
            offs_n = start + tl.arange(0, BLOCK_N)
            k = tl.load(K + b * skb + hk * skh + offs_n[None, :] * sks + offs_d[:, None], mask=offs_n[None, :] < sk,
                        other=0.0)
            qk = tl.dot(q, k) * scale
            valid = offs_n[None, :] < sk
            if CAUSAL:
                valid = valid & (offs_n[None, :] <= diag[:, None])
            qk = tl.where(valid, qk, float("-inf"))
            m_new = tl.maximum(m_i, tl.max(qk, 1))
            m_safe = tl.where(m_new == float("-inf"), 0.0, m_new)
            p = tl.exp(qk - m_safe[:, None])
            alpha = tl.exp(m_i - m_safe)
            l_i = l_i * alpha + tl.sum(p, 1)
            v = tl.load(V + b * svb + hk * svh + offs_n[:, None] * svs + offs_d[None, :], mask=offs_n[:, None] < sk,
                        other=0.0)
            acc = acc * alpha[:, None] + tl.dot(p.to(v.dtype), v)
            m_i = m_new
        out = tl.where(l_i[:, None] > 0, acc / l_i[:, None], 0.0)
        tl.store(Out + b * sob + h * soh + offs_m[:, None] * sos + offs_d[None, :], out.to(Out.dtype.element_ty),
                 mask=offs_m[:, None] < sq)


def attention_triton(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, *, causal: bool, scale: float) -> Any:
    """The Triton kernel (contiguous bhsd inputs, head dim a power of two from 16 to 128)."""
    b, hq, sq, d = q.shape
    hk, sk = k.shape[1], k.shape[2]
    o = torch.empty_like(q)
    block_m, block_n = 64, 64
    grid = (triton.cdiv(sq, block_m), b * hq)
    _fwd_kernel[grid](q, k, v, o, scale, sq, sk, hq // hk, hq,
                      q.stride(0), q.stride(1), q.stride(2), k.stride(0), k.stride(1), k.stride(2),
                      v.stride(0), v.stride(1), v.stride(2), o.stride(0), o.stride(1), o.stride(2),
                      D=d, BLOCK_M=block_m, BLOCK_N=block_n, CAUSAL=causal)
    return o


class TritonExampleBackend:
    """The example kernel as a pytest-attn back end (Triton on a GPU, the fallback elsewhere)."""

    name = "triton-example"
    description = "examples/triton_attention: a tiled online-softmax kernel in Triton (PyTorch fallback on CPU)"
    layout = "bhsd"
    needs_cuda = False
    has_backward = False
    default_enabled = True
    empty_rows = "zero"

    def available(self) -> str | None:
        return None

    def supports(self, case: Any, device: Any) -> str | None:
        from pytest_attn.core.masks import flag_form

        if case.ragged:
            return "triton-example takes a dense batch"
        if case.head_dim_qk != case.head_dim_v:
            return "triton-example needs the same head dim for q/k and v"
        if flag_form(case) not in ((-1, -1), (-1, 0)):
            return "triton-example takes no mask or bottom-right causal only"
        if device.is_cuda:
            if case.dtype not in ("fp16", "bf16"):
                return f"triton-example's Triton kernel takes fp16/bf16, not {case.dtype}"
            d = case.head_dim_qk
            if d < 16 or d > 128 or d & (d - 1):
                return f"triton-example's Triton kernel takes head dims 16, 32, 64, 128 (got {d})"
        elif case.dtype == "fp8":
            return "the fallback takes fp16/bf16/fp32"
        return None

    def workspace_bytes(self, case: Any) -> int:
        return 0

    def prepare(self, case: Any, inputs: Any) -> Any:
        from pytest_attn.core.masks import flag_form

        q, k, v = inputs.q, inputs.k, inputs.v
        causal = flag_form(case) == (-1, 0)
        scale = case.scale if case.softmax_scale is not None else 1 / math.sqrt(case.head_dim_qk)
        if q.is_cuda and triton is not None:
            return lambda: attention_triton(q, k, v, causal=causal, scale=scale)
        return lambda: attention_fallback(q, k, v, causal=causal, scale=scale)
