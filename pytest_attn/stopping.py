"""When to stop warming up and sampling, which timer to use, how many input sets. Pure.

Precision is the half-width of a distribution-free 95 % confidence interval for the median
(order statistics, no normality assumed: GPU times are skewed and have outliers), relative to the
median. Sampling stops when it is under the target (default 1 %) with enough samples, or when the
per-case time cap is reached; the achieved precision is reported either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

Z95 = 1.959963984540054

TIMER_KINDS: tuple[str, ...] = ("auto", "cuda-event", "cuda-graph", "kernel-sum", "cpu")


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    xs = sorted(values)
    n = len(xs)
    mid = n // 2
    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2


def median_ci(values: Sequence[float], z: float = Z95) -> tuple[float, float]:
    """Order-statistic confidence interval of the median: ranks n/2 -+ z*sqrt(n)/2."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("confidence interval of no values")
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half) - 1)
    return xs[lo], xs[max(lo, hi)]


def relative_precision(values: Sequence[float]) -> float:
    """Half-width of the median's 95 % CI over the median; inf with fewer than 5 samples."""
    if len(values) < 5:
        return math.inf
    lo, hi = median_ci(values)
    m = median(values)
    return (hi - lo) / 2 / m if m > 0 else math.inf


@dataclass(frozen=True)
class StopRule:
    target_precision: float = 0.01
    min_samples: int = 10
    max_samples: int = 100_000
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


# A call shorter than this is captured in a CUDA graph and timed by the sum of its kernels' device
# time ("kernel-sum"): one pair of events around a single short call measures host launch overhead
# (a 14 us decode step read ~100 us on an H200), and even a graph replay adds ~1 us per kernel.
GRAPH_THRESHOLD_S = 5e-3
GRAPH_TARGET_REPLAY_S = 2e-3
GRAPH_MAX_CALLS = 100
KERNEL_SUM_MIN_CALLS = 8


def choose_timer(requested: str, on_cuda: bool, call_estimate_s: float) -> str:
    """The timer for a case: the user's choice, else kernel-sum over graph replays for short CUDA
    calls and events for long ones (where host overhead is under ~1 %)."""
    if requested not in TIMER_KINDS:
        raise ValueError(f"timer={requested!r} is not one of {', '.join(TIMER_KINDS)}")
    if not on_cuda:
        return "cpu"
    if requested != "auto":
        return requested
    return "kernel-sum" if call_estimate_s < GRAPH_THRESHOLD_S else "cuda-event"


def graph_calls_per_replay(call_estimate_s: float, sets: int = 1, *, kernel_sum: bool = False) -> int:
    """Calls captured per graph, in whole passes over the ``sets`` rotated input copies.

    ``kernel_sum``: the figure is the kernels' own time, which a short replay does not distort, so
    the count is fixed (at least KERNEL_SUM_MIN_CALLS): it does not follow the warm-up's noisy
    estimate, and runs compare like with like (seen on an H200: 23 vs 92 calls per replay moved a
    16 us decode step by 2 %). Otherwise a replay lasts about GRAPH_TARGET_REPLAY_S, so the replay's
    own launch is amortised."""
    if kernel_sum:
        calls = KERNEL_SUM_MIN_CALLS
    elif call_estimate_s <= 0:
        calls = GRAPH_MAX_CALLS
    else:
        calls = max(1, min(GRAPH_MAX_CALLS, math.ceil(GRAPH_TARGET_REPLAY_S / call_estimate_s)))
    return sets * math.ceil(calls / sets)


def input_sets(input_bytes: int, l2_bytes: int | None, max_sets: int = 32) -> int:
    """How many copies of the inputs to rotate through so that consecutive calls do not find their
    data in L2: enough that the copies together exceed 3x the L2 size."""
    if not l2_bytes or input_bytes <= 0 or input_bytes >= 3 * l2_bytes:
        return 1
    return max(1, min(max_sets, math.ceil(3 * l2_bytes / input_bytes)))
