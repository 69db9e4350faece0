"""The upcast reference as a back end: explicit math in fp32, per sequence, any mask, any layout.

Slow on purpose and off by default; select it with ``--attn-backends=reference,...`` to see what
an unfused implementation costs, or use it as the oracle in your own tests.
"""

from __future__ import annotations

from typing import Any

from ..core.case import FORMS, AttnCase
from ..core.device import DeviceInfo
from ..core.layouts import Inputs
from ..oracle.reference import reference_attention
from .base import ForwardFn


class ReferenceBackend:
    name = "reference"
    description = "upcast fp32 reference: explicit softmax(q k^T) v per sequence (pytest_attn.oracle.reference)"
    layout = "thd"
    needs_cuda = False
    has_backward = True
    default_enabled = False
    distribution: str | None = None  # PyTorch's own
    empty_rows = "zero"
    forms = FORMS  # the oracle's own math: every form

    def available(self) -> str | None:
        return None

    def supports(self, case: AttnCase, device: DeviceInfo) -> str | None:
        return None

    def workspace_bytes(self, case: AttnCase) -> int:
        # fp32 copies of q/k/v (kv heads repeated) plus a ~256 MB block of scores; autograd keeps
        # every block's scores and probabilities for the backward pass.
        upcast = 4 * (case.total_q * case.heads_q * case.head_dim_qk
                      + 2 * case.total_k * case.heads_q * max(case.head_dim_qk, case.head_dim_v))
        if case.direction == "fwd+bwd":
            scores = sum(sq * sk for sq, sk in zip(case.seqlens_q, case.seqlens_k, strict=True)) * case.heads_q * 4 * 3
            return upcast + scores
        return upcast + (1 << 28)

    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn:
        def forward() -> Any:
            return reference_attention(inputs, case)

        return forward
