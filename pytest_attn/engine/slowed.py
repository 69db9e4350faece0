"""A back end made slower on purpose, to show that the regression gate catches a slowdown.

``--attn-inject-slowdown=6%`` wraps every back end: after each forward call it adds a busy wait of
that fraction of the timed step's own time (forward, or forward and backward) -- on a GPU a spinning
kernel (``torch.cuda._sleep``) on the same stream, so it lands inside the CUDA graph and the
kernel-sum timer like a slower kernel would; on a CPU a spin loop. Names are unchanged, so the gate
compares the slowed run with the stored baseline.

A spinning kernel draws little power: on a GPU held at its power cap, the attention kernel after it
runs at a higher clock, so compute-bound cases slow down by less than asked (on an H200, 6 % asked
gave +2.7 to +4.7 % on the HunyuanVideo forward).
"""

from __future__ import annotations

import time
from typing import Any

from ..backends.base import ForwardFn
from ..core.case import AttnCase
from ..core.layouts import Inputs
from .inputs import make_step
from .profiler import events_seconds


def _cuda_cycles_per_second() -> float:
    import torch

    cycles = 10_000_000
    return cycles / events_seconds(lambda: torch.cuda._sleep(cycles), 1)


def _time_once(fn: ForwardFn, cuda: bool) -> float:
    if cuda:
        return events_seconds(fn, 5) / 5
    fn()  # warm
    t0 = time.perf_counter()
    for _ in range(5):
        fn()
    return (time.perf_counter() - t0) / 5


class SlowedBackend:
    """``inner`` with a busy wait of ``fraction`` x its call time after every call."""

    def __init__(self, inner: Any, fraction: float) -> None:
        self._inner = inner
        self.fraction = fraction
        self.description = f"{inner.description}, slowed by {fraction:.1%} on purpose (--attn-inject-slowdown)"

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn:
        forward = self._inner.prepare(case, inputs)
        cuda = inputs.q.is_cuda
        delay_s = self.fraction * _time_once(make_step(case, forward, inputs), cuda)  # the whole timed step
        if cuda:
            import torch

            cycles = max(1, int(delay_s * _cuda_cycles_per_second()))

            def slowed() -> Any:
                out = forward()
                torch.cuda._sleep(cycles)
                return out

            return slowed

        def spun() -> Any:
            out = forward()
            end = time.perf_counter() + delay_s
            while time.perf_counter() < end:
                pass
            return out

        return spun
