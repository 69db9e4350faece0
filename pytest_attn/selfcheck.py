"""``--attn-verify-timing``: one extra profiled run per case; the kernels' own time (CUPTI, through
the PyTorch profiler) must agree with the reported median within 5 %, else the case is flagged with
both numbers -- a launch-bound call, extra kernels, or a CUDA graph that did not capture the work."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

TOLERANCE = 0.05


@dataclass(frozen=True)
class TimingCheck:
    reported_s: float
    kernel_s: float
    tolerance: float = TOLERANCE

    @property
    def ratio(self) -> float:
        return self.reported_s / self.kernel_s if self.kernel_s > 0 else float("inf")

    @property
    def ok(self) -> bool:
        return abs(self.ratio - 1) <= self.tolerance

    def describe(self) -> str:
        verdict = "agrees with" if self.ok else "DIFFERS from"
        return (f"reported median {self.reported_s * 1e6:.2f} us {verdict} the profiler's kernel time"
                f" {self.kernel_s * 1e6:.2f} us (ratio {self.ratio:.3f}, tolerance {self.tolerance:.0%})")

    def as_extra_info(self) -> dict[str, object]:
        return {"verify_kernel_s": self.kernel_s, "verify_ratio": self.ratio, "verify_ok": self.ok}


def profiled_kernel_time(timer: Any, flush: Callable[[], Any] | None, samples: int = 3) -> float:
    """Kernel time per call of ``samples`` samples of ``timer`` (for kernel-sum, of its inner graph or
    event timer), read by the profiler, leaving out the L2-flush kernels. GPU I/O."""
    from .timing import device_activity

    flush_names = {name for name, _ in device_activity(flush)} if flush is not None else set()
    base = getattr(timer, "inner", timer)
    activity = device_activity(lambda: [base.sample() for _ in range(samples)])
    busy = sum(sec for name, sec in activity if name not in flush_names)
    return busy / (samples * base.calls_per_sample)
