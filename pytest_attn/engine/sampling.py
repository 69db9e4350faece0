"""The measuring loops: warm up until the call's time settles, then sample until the median is
precise enough or a cap is reached, reading NVML's clocks-event reasons and SM clock around each
sample (outside the timed region). They take the timer and the clocks as arguments, so the stopping
logic is tested with fakes.
"""

from __future__ import annotations

import gc
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from ..core.stats import median
from .stopping import StopRule, WarmupRule, stop_reason, warmup_settled
from .timers import Clock, Timer


@dataclass
class WarmupReport:
    times_s: list[float]
    elapsed_s: float
    settled: bool
    collections: int = 0  # the garbage collector's runs during the warm-up (they stall the host's launches)
    launch_s: list[float] = field(default_factory=list)  # the host's time to launch each call (events timing)
    host_gap: float | None = None  # 1 - one profiled call's kernels / the events estimate, where both were read
    kernels_s: float | None = None  # one profiled call's kernels (s), where they were read

    @property
    def calls(self) -> int:
        return len(self.times_s)

    @property
    def estimate_s(self) -> float:
        """Time of one call once warm: the median of the last three warm-up calls, the first call left out
        (it builds plans, compiles, allocates) wherever there was another."""
        warm = self.times_s[1:] or self.times_s
        return median(warm[-3:])

    def describe(self) -> str:
        """The warm-up in words, for the record of why a timer was chosen."""
        first = f"first call {self.times_s[0] * 1e3:.2f} ms" if self.times_s else "no call"
        warm = self.launch_s[1:] or self.launch_s
        host = f"; the host took {median(warm[-3:]) * 1e3:.3g} ms to launch a call" if warm else ""
        gcs = f"; {self.collections} garbage collection(s) during it" if self.collections else ""
        return f"{self.calls} calls in {self.elapsed_s:.2f} s, {first}{host}{gcs}"


@contextmanager
def counting_collections() -> Iterator[list[int]]:
    """``[n]``: how many times the garbage collector ran inside the block."""
    count = [0]

    def seen(phase: str, info: dict[str, int]) -> None:
        if phase == "start":
            count[0] += 1

    gc.callbacks.append(seen)
    try:
        yield count
    finally:
        gc.callbacks.remove(seen)


def warm_up(timed_call: Callable[[], float], rule: WarmupRule, clock: Clock = time.perf_counter) -> WarmupReport:
    """Run the call being measured until its time settles (see :class:`WarmupRule`)."""
    t0 = clock()
    times: list[float] = []
    with counting_collections() as collections:
        while True:
            times.append(timed_call())
            elapsed = clock() - t0
            settled = warmup_settled(times, elapsed, rule)
            if settled or (elapsed >= rule.max_time_s and len(times) >= rule.min_calls):
                return WarmupReport(times, elapsed, settled, collections[0])


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
    before_sample: Callable[[int], None] | None = None,
) -> Sampling:
    """Take samples until the median is known to the rule's precision or a cap is reached, reading
    NVML's clocks-event reasons before and after each sample and the SM clock after it (outside the
    timed region); ``before_sample(i)`` runs before sample ``i``, untimed (the spot checks)."""
    t0 = clock()
    sampling = Sampling([], "", 0.0)
    while True:
        if before_sample is not None:
            before_sample(len(sampling.samples_s))
        take_sample(timer, sampling, read_sm_clock, read_reasons)
        sampling.elapsed_s = clock() - t0
        reason = stop_reason(sampling.samples_s, sampling.elapsed_s, rule)
        if reason:
            sampling.stop_reason = reason
            return sampling


def take_samples(timer: Timer, into: Sampling, count: int, read_sm_clock: Callable[[], int | None],
                 read_reasons: Callable[[], int | None]) -> None:
    """``count`` samples into ``into``: together where the timer can take them so (a kernel-sum timer's
    :meth:`~pytest_attn.engine.timers.KernelSumTimer.samples`: one trace for all), with NVML's reasons read
    before and after them all and the SM clock after them, for each; else one by one (:func:`take_sample`)."""
    together = getattr(timer, "samples", None)
    if together is None or count < 2:
        for _ in range(count):
            take_sample(timer, into, read_sm_clock, read_reasons)
        return
    before = read_reasons()
    times = together(count)
    after = read_reasons()
    reasons = None if before is None and after is None else (before or 0) | (after or 0)
    clock = read_sm_clock() or None
    into.samples_s += times
    into.sample_reasons += [reasons] * len(times)
    into.sample_clocks += [clock] * len(times)


def take_sample(timer: Timer, into: Sampling, read_sm_clock: Callable[[], int | None],
                read_reasons: Callable[[], int | None]) -> None:
    """One sample into ``into``, with NVML's clocks-event reasons read before and after it and the SM
    clock after it (outside the timed region)."""
    before = read_reasons()
    into.samples_s.append(timer.sample())
    after = read_reasons()
    into.sample_reasons.append(None if before is None and after is None else (before or 0) | (after or 0))
    into.sample_clocks.append(read_sm_clock() or None)
