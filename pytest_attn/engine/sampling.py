"""The measuring loops: warm up until the call's time settles, then sample until the median is
precise enough or a cap is reached, reading NVML's clocks-event reasons and SM clock around each
sample (outside the timed region). They take the timer and the clocks as arguments, so the stopping
logic is tested with fakes.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field

from ..core.stats import median
from .stopping import StopRule, WarmupRule, stop_reason, warmup_settled
from .timers import Clock, Timer


@dataclass
class WarmupReport:
    times_s: list[float]
    elapsed_s: float
    settled: bool

    @property
    def calls(self) -> int:
        return len(self.times_s)

    @property
    def estimate_s(self) -> float:
        """Time of one call once warm: median of the last three warm-up calls."""
        return median(self.times_s[-3:])


def warm_up(timed_call: Callable[[], float], rule: WarmupRule, clock: Clock = time.perf_counter) -> WarmupReport:
    """Run the call being measured until its time settles (see :class:`WarmupRule`)."""
    t0 = clock()
    times: list[float] = []
    while True:
        times.append(timed_call())
        elapsed = clock() - t0
        if warmup_settled(times, elapsed, rule):
            return WarmupReport(times, elapsed, True)
        if elapsed >= rule.max_time_s and len(times) >= rule.min_calls:
            return WarmupReport(times, elapsed, False)


@dataclass
class Sampling:
    samples_s: list[float]
    stop_reason: str
    elapsed_s: float
    sample_clocks: list[int | None] = field(default_factory=list)  # one per sample
    sample_reasons: list[int | None] = field(default_factory=list)  # NVML clocks-event reasons, one per sample


def sample_until(
    timer: Timer,
    rule: StopRule,
    clock: Clock = time.perf_counter,
    read_sm_clock: Callable[[], int | None] = lambda: None,
    read_reasons: Callable[[], int | None] = lambda: None,
) -> Sampling:
    """Take samples until the median is known to the rule's precision or a cap is reached, reading
    NVML's clocks-event reasons before and after each sample and the SM clock after it (outside the
    timed region)."""
    t0 = clock()
    sampling = Sampling([], "", 0.0)
    while True:
        take_sample(timer, sampling, read_sm_clock, read_reasons)
        sampling.elapsed_s = clock() - t0
        reason = stop_reason(sampling.samples_s, sampling.elapsed_s, rule)
        if reason:
            sampling.stop_reason = reason
            return sampling


def take_sample(timer: Timer, into: Sampling, read_sm_clock: Callable[[], int | None],
                read_reasons: Callable[[], int | None]) -> None:
    """One sample into ``into``, with NVML's clocks-event reasons read before and after it and the SM
    clock after it (outside the timed region)."""
    before = read_reasons()
    into.samples_s.append(timer.sample())
    after = read_reasons()
    into.sample_reasons.append(None if before is None and after is None else (before or 0) | (after or 0))
    into.sample_clocks.append(read_sm_clock() or None)
