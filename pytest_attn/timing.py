"""The measurement engine: timers, warm-up and sampling loops, and the hand-over to pytest-benchmark.

Timers (all report seconds per call):

* ``cuda-event``: one call per sample between two CUDA events. Before each sample, outside the
  timed region, a buffer twice the L2 size is zeroed so every sample starts with a cold L2 (so
  rotating input copies would add nothing here: the flush has already evicted them).
* ``cuda-graph``: ``n`` calls (cycling through rotated input sets) captured in one CUDA graph; a
  sample is one replay between two events, divided by ``n``. Short calls are timed this way: one
  event pair around a single 14 us decode call measures ~100 us of host launch overhead.
* ``kernel-sum``: the samples of a graph (or event) timer, read by CUPTI through the PyTorch
  profiler: the sum of the device activity each call launched. This is the kernels' own time, free
  of host overhead and of the ~1 us gaps between kernels inside a replay; short CUDA calls use it.
* ``cpu``: ``time.perf_counter`` around one call, for the CPU profile.

The loops (:func:`warm_up`, :func:`sample_until`) take the timer and the clock as arguments, so
the stopping logic is tested with fakes. pytest-benchmark receives the per-call times through its
public surface: ``benchmark.pedantic`` with the ``timer`` option set to :func:`replay_clock`, a
clock that advances by exactly one measured sample per round.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

from .stopping import StopRule, WarmupRule, median, stop_reason, warmup_settled

if TYPE_CHECKING:
    import torch

Step = Callable[[], Any]
Clock = Callable[[], float]


class Timer(Protocol):
    kind: str
    calls_per_sample: int

    def sample(self) -> float:
        """Seconds per call, from one sample."""
        ...


# ---- timers --------------------------------------------------------------------------------
class CpuTimer:
    kind = "cpu"
    calls_per_sample = 1

    def __init__(self, steps: Sequence[Step], clock: Clock = time.perf_counter) -> None:
        self._steps, self._clock, self._i = list(steps), clock, 0

    def sample(self) -> float:
        step = self._steps[self._i % len(self._steps)]
        self._i += 1
        t0 = self._clock()
        step()
        return self._clock() - t0


class L2Flush:
    """Zeroes a buffer of twice the L2 size on the current stream (outside any timed region)."""

    def __init__(self, l2_bytes: int | None, device: torch.device) -> None:
        import torch

        size = 2 * (l2_bytes or 64 << 20)
        self._buf = torch.empty(size, dtype=torch.int8, device=device)

    def __call__(self) -> None:
        self._buf.zero_()


class CudaEventTimer:
    kind = "cuda-event"
    calls_per_sample = 1

    def __init__(self, steps: Sequence[Step], flush: Callable[[], None]) -> None:
        import torch

        self._steps, self._flush, self._i = list(steps), flush, 0
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def sample(self) -> float:
        step = self._steps[self._i % len(self._steps)]
        self._i += 1
        self._flush()
        self._start.record()
        step()
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) / 1e3


class CudaGraphTimer:
    kind = "cuda-graph"

    def __init__(self, steps: Sequence[Step], calls: int, flush: Callable[[], None]) -> None:
        """Capture ``calls`` steps (cycling through ``steps``) into one graph. Raises whatever
        capture raises; the caller falls back to events and records why."""
        import torch

        self.calls_per_sample = calls
        self._flush = flush
        side = torch.cuda.Stream()
        side.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(side):  # warm-up on a side stream, as capture requires
            for step in steps:
                step()
        torch.cuda.current_stream().wait_stream(side)
        torch.cuda.synchronize()
        self._graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(self._graph):
            for i in range(calls):
                steps[i % len(steps)]()
        torch.cuda.synchronize()
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def sample(self) -> float:
        self._flush()
        self._start.record()
        self._graph.replay()
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) / 1e3 / self.calls_per_sample


def events_seconds(fn: Callable[[], Any], reps: int) -> float:
    """Seconds ``reps`` calls of ``fn`` take between two CUDA events, after one warm call (for quick
    calibrations outside the measured cases: ceilings, deliberate slowdowns)."""
    import torch

    fn()
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    for _ in range(reps):
        fn()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3


def device_activity(run: Callable[[], Any]) -> list[tuple[str, float]]:
    """(name, seconds) of every kernel, memset and memcpy that ``run()`` put on the GPU, as CUPTI
    records them through ``torch.profiler`` (device timestamps: no host time, no launch gaps)."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
    return [
        (e.name, e.time_range.elapsed_us() / 1e6)
        for e in prof.events()
        if e.device_type == DeviceType.CUDA
    ]


class KernelSumTimer:
    """Per-call time as the sum of the call's device activity (kernels, memsets, copies), read by
    CUPTI over the samples of an inner CUDA-graph or event timer. It is what the PyTorch profiler
    reports as the kernels' time: free of host launch overhead and of the ~1 us launch gaps between
    kernels that a graph replay still contains (``replay_s`` keeps the inner timer's figures, so the
    gap is reported too). Kernels running concurrently on several streams would be counted twice;
    attention calls run on one stream."""

    kind = "kernel-sum"

    def __init__(self, inner: CudaGraphTimer | CudaEventTimer, flush: Callable[[], None]) -> None:
        self.inner = inner
        self.calls_per_sample = inner.calls_per_sample
        self.replay_s: list[float] = []
        self._flush_names = {name for name, _ in device_activity(flush)}

    def sample(self) -> float:
        # one plain sample for the replay figure (CUPTI tracing slows replays a little), then one
        # traced sample for the kernel time
        self.replay_s.append(self.inner.sample())
        activity = device_activity(self.inner.sample)
        busy = sum(sec for name, sec in activity if name not in self._flush_names)
        return busy / self.calls_per_sample


# ---- loops ---------------------------------------------------------------------------------
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
    sm_clocks_mhz: list[int] = field(default_factory=list)
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
    samples: list[float] = []
    clocks: list[int] = []
    per_clock: list[int | None] = []
    per_reason: list[int | None] = []
    while True:
        before = read_reasons()
        samples.append(timer.sample())
        after = read_reasons()
        per_reason.append(None if before is None and after is None else (before or 0) | (after or 0))
        mhz = read_sm_clock()
        per_clock.append(mhz or None)
        if mhz:
            clocks.append(mhz)
        elapsed = clock() - t0
        reason = stop_reason(samples, elapsed, rule)
        if reason:
            return Sampling(samples, reason, elapsed, clocks, per_clock, per_reason)


# ---- hand-over to pytest-benchmark ---------------------------------------------------------
_now = [0.0]


def replay_clock() -> float:
    """pytest-benchmark's ``timer`` for pytest-attn cases: a clock that only moves when a measured
    sample is replayed into it, so each pedantic round lasts exactly one measured sample."""
    return _now[0]


def _advance(seconds: float) -> None:
    _now[0] += seconds


def feed_benchmark(benchmark: Any, samples_s: Sequence[float]) -> None:
    """Record ``samples_s`` as pytest-benchmark's rounds (public ``pedantic`` API only)."""
    it = iter(samples_s)
    _now[0] = 0.0  # keeps the clock small, so end - start is exact to ~1e-16 s
    benchmark.pedantic(lambda: _advance(next(it)), rounds=len(samples_s), iterations=1, warmup_rounds=0)
