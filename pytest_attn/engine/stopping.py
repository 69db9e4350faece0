"""When to stop warming up and when to stop sampling. Pure.

Sampling stops when the median's precision (:func:`pytest_attn.core.stats.relative_precision`: the
half-width of its distribution-free 95 % confidence interval, relative) is under the target (default
1 %) with enough samples, or when the per-case time cap is reached; the achieved precision is
reported either way.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.stats import median, relative_precision

#: The most samples a case takes (a stop, "sample-cap", however precise it is by then): --attn-min-samples above it
#: could never be honoured.
MAX_SAMPLES = 100_000


@dataclass(frozen=True)
class StopRule:
    target_precision: float = 0.01
    min_samples: int = 10
    max_samples: int = MAX_SAMPLES
    max_time_s: float = 5.0

    def __post_init__(self) -> None:
        if not 0 < self.target_precision < 1:
            raise ValueError(f"target_precision={self.target_precision!r} must be in (0, 1), e.g. 0.01")
        if self.min_samples < 5:
            raise ValueError(f"min_samples={self.min_samples!r} must be >= 5 to estimate precision")
        if self.max_samples < self.min_samples:
            raise ValueError(f"max_samples={self.max_samples} is smaller than min_samples={self.min_samples}")
        if self.max_time_s <= 0:
            raise ValueError(f"max_time_s={self.max_time_s!r} must be positive")


def stop_reason(samples: Sequence[float], elapsed_s: float, rule: StopRule) -> str | None:
    """Why sampling should stop now ("precision", "time-cap", "sample-cap"), or None to go on."""
    n = len(samples)
    if n >= rule.min_samples and relative_precision(samples) <= rule.target_precision:
        return "precision"
    if n >= rule.max_samples:
        return "sample-cap"
    if elapsed_s >= rule.max_time_s and n >= min(rule.min_samples, 5):
        return "time-cap"
    return None


@dataclass(frozen=True)
class WarmupRule:
    """Warm up until the call has run ``min_calls`` times for ``min_time_s`` and the last
    ``window`` times agree with the ``window`` before them within ``settle_tolerance``
    (compilation, JIT, autotuning and clock ramp-up all show as a falling time), or until
    ``max_time_s`` (then the report says it did not settle). Calls of ``long_call_s`` or more
    vary little from call to call, so for them the last call is compared with the one before."""

    min_calls: int = 3
    min_time_s: float = 0.05
    max_time_s: float = 10.0
    window: int = 3
    settle_tolerance: float = 0.05
    long_call_s: float = 0.1


def warmup_settled(times: Sequence[float], elapsed_s: float, rule: WarmupRule) -> bool:
    window = 1 if times and times[-1] >= rule.long_call_s else rule.window
    if len(times) < max(rule.min_calls, 2 * window) or elapsed_s < rule.min_time_s:
        return False
    recent = median(times[-window:])
    before = median(times[-2 * window : -window])
    return abs(recent - before) <= rule.settle_tolerance * before
