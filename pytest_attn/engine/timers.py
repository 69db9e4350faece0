"""Timers, and the one factory that chooses and builds them, with their fall-backs.

Timers (all report seconds per call):

* ``cuda-event``: one call per sample between two CUDA events. Before each sample, outside the timed
  region, a buffer twice the L2 size is zeroed so every sample starts with a cold L2.
* ``cuda-graph``: ``n`` calls (cycling through rotated input sets) captured in one CUDA graph; a sample is
  one replay between two events, divided by ``n`` (one event pair around a single 14 us decode call
  measures ~100 us of host launch overhead).
* ``kernel-sum``: the samples of a graph (or event) timer, read by CUPTI through the PyTorch profiler: the
  sum of the device activity each call launched, free of host overhead and of the ~1 us gaps between
  kernels inside a replay; short CUDA calls use it (an A/B arm traces a block's samples together).
* ``cpu``: ``time.perf_counter`` around one call, for the CPU profile.

:func:`choose_timer` picks by call length (``auto``: kernel-sum under 5 ms, events above; an A/B arm
takes kernel-sum for every call, reading a long one over events);
:func:`build_timer` builds the chosen one -- rotated input sets and the graph capture included -- and
falls back, saying why, where a library cannot be captured or CUPTI cannot read kernel times.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from ..core.kernel_names import is_kernel, launch_mismatch
from ..core.record import TimerPin
from .profiler import device_activity, split_samples

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


#: The clock CPU timings read (tests replace it with a fake that the work under test advances).
CPU_CLOCK: Clock = time.perf_counter


class CaptureError(Exception):
    """A CUDA graph that does not replay what the eager call runs; the message has both kernel lists."""


# ---- timers --------------------------------------------------------------------------------
class CpuTimer:
    kind = "cpu"
    calls_per_sample = 1

    def __init__(self, steps: Sequence[Step], clock: Clock | None = None) -> None:
        self._steps, self._clock, self._i = list(steps), clock or CPU_CLOCK, 0

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
        self.launch_s: list[float] = []  # the host's time to launch each sample's call (the warm-up's diagnosis)

    def sample(self) -> float:
        step = self._steps[self._i % len(self._steps)]
        self._i += 1
        self._flush()
        self._start.record()
        t0 = time.perf_counter()
        step()
        self.launch_s.append(time.perf_counter() - t0)
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) / 1e3


def rotation_order(calls: int, sets: int) -> list[int]:
    """Which input set each captured call uses: every set in turn, wrapping. Checked, because a rotation
    that never wraps (a modulo of the wrong count) silently times warm L2 -- a known failure elsewhere."""
    order = [i % sets for i in range(calls)]
    if calls % sets or set(order) != set(range(sets)):
        raise ValueError(f"{calls} calls over {sets} input sets do not use every set equally")
    return order


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
        self.first_output: Any = None  # what the first captured call (input set 0) returns, graph-owned
        with torch.cuda.graph(self._graph):
            for i, index in enumerate(rotation_order(calls, len(steps))):
                out = steps[index]()
                if i == 0:
                    self.first_output = out
        torch.cuda.synchronize()
        self._start = torch.cuda.Event(enable_timing=True)
        self._end = torch.cuda.Event(enable_timing=True)

    def replay(self) -> None:
        self._graph.replay()

    def sample(self) -> float:
        self._flush()
        self._start.record()
        self._graph.replay()
        self._end.record()
        self._end.synchronize()
        return self._start.elapsed_time(self._end) / 1e3 / self.calls_per_sample


def _tensors(value: Any) -> list[Any]:
    import torch

    if isinstance(value, torch.Tensor):
        return [value]
    if isinstance(value, (list, tuple)):
        return [t for v in value for t in _tensors(v)]
    return []


def check_capture(step: Step, graph: CudaGraphTimer) -> str:
    """Before a graph-timed figure is trusted: one replay launches the kernels of one eager call, times
    the calls captured, and rewrites the output (poisoned with NaN first, so a kernel left out of the
    capture cannot pass with the stale values of the capture-time run). Raises :class:`CaptureError`."""
    import torch

    try:
        eager = [name for name, _ in device_activity(step)]
        replayed = [name for name, _ in device_activity(graph.replay)]
    except Exception as exc:  # no CUPTI: the output check below still runs
        kernels = f"kernels not compared (the profiler could not read them: {type(exc).__name__})"
    else:
        problem = launch_mismatch(eager, replayed, graph.calls_per_sample)
        if problem:
            raise CaptureError(problem)
        count = sum(1 for n in eager if is_kernel(n))
        kernels = f"a replay ran the eager call's {count} kernel(s) x {graph.calls_per_sample} calls"
    captured = _tensors(graph.first_output)
    for t in captured:
        if t.is_floating_point():
            t.fill_(float("nan"))
    graph.replay()
    fresh = _tensors(step())
    torch.cuda.synchronize()
    for i, (a, b) in enumerate(zip(captured, fresh, strict=False)):
        if not a.is_floating_point():
            continue
        both = torch.isfinite(a) & torch.isfinite(b)  # rows a back end leaves NaN by design stay out
        lost = bool((torch.isfinite(b) & ~torch.isfinite(a)).any())
        diff = float((a.float() - b.float())[both].abs().max()) if bool(both.any()) else 0.0
        scale = float(b.float()[both].abs().max()) if bool(both.any()) else 0.0
        if lost or diff > 1e-2 * scale + 1e-3:
            raise CaptureError(f"the CUDA graph's output {i} differs from the eager call's after a replay (it was"
                               " poisoned before the replay: a kernel that did not run leaves it so)")
    return f"{kernels}; the replay rewrote the output (poisoned before it) with the eager call's values"


class KernelSumTimer:
    """Per-call time as the sum of the call's device activity (kernels, memsets, copies), read by
    CUPTI over the samples of an inner CUDA-graph or event timer. It is what the PyTorch profiler
    reports as the kernels' time: free of host launch overhead and of the ~1 us launch gaps between
    kernels that a graph replay still contains (over a graph, ``replay_s`` keeps an untraced replay
    before each traced one, so the gap is reported too). Kernels running concurrently on several
    streams would be counted twice; attention calls run on one stream."""

    kind = "kernel-sum"

    def __init__(self, inner: CudaGraphTimer | CudaEventTimer, flush: Callable[[], None]) -> None:
        self.inner = inner
        self.calls_per_sample = inner.calls_per_sample
        self.replay_s: list[float] = []
        self._flush_names = {name for name, _ in device_activity(flush)}

    def sample(self) -> float:
        if self.inner.kind == "cuda-graph":  # an untraced replay for the replay figure (tracing slows it a little)
            self.replay_s.append(self.inner.sample())
        activity = device_activity(self.inner.sample)
        busy = sum(sec for name, sec in activity if name not in self._flush_names)
        return busy / self.calls_per_sample

    def samples(self, count: int) -> list[float]:
        """``count`` graph samples in one trace (about half the host time of one trace each), cut by
        :func:`split_samples`; one by one where they cannot be cut so. First ``count`` untraced replays."""
        if count > 1 and self.inner.kind == "cuda-graph":
            self.replay_s += [self.inner.sample() for _ in range(count)]
            busy = split_samples(device_activity(lambda: [self.inner.sample() for _ in range(count)]),
                                 self._flush_names, count)
            if busy is not None:
                return [sec / self.calls_per_sample for sec in busy]
        return [self.sample() for _ in range(count)]


# ---- which timer, how many calls and input sets (pure) -------------------------------------------
# A call shorter than this is captured in a CUDA graph and timed by the sum of its kernels' device
# time ("kernel-sum"): one pair of events around a single short call measures host launch overhead
# (a 14 us decode step read ~100 us on an H200), and even a graph replay adds ~1 us per kernel.
GRAPH_THRESHOLD_S = 5e-3
GRAPH_TARGET_REPLAY_S = 2e-3
GRAPH_MAX_CALLS = 100
KERNEL_SUM_MIN_CALLS = 8


TIMER_KINDS: tuple[str, ...] = ("auto", "cuda-event", "cuda-graph", "kernel-sum", "cpu")


def choose_timer(requested: str, on_cuda: bool, call_estimate_s: float,
                 events_from_s: float = GRAPH_THRESHOLD_S) -> str:
    """The timer for a case: the user's choice, else kernel-sum over graph replays for CUDA calls shorter
    than ``events_from_s`` and events for longer ones (A/B arms take kernel-sum further:
    :data:`pytest_attn.engine.ab.worker.EVENTS_FROM_S`)."""
    if requested not in TIMER_KINDS:
        raise ValueError(f"timer={requested!r} is not one of {', '.join(TIMER_KINDS)}")
    if not on_cuda:
        return "cpu"
    if requested != "auto":
        return requested
    return "kernel-sum" if call_estimate_s < events_from_s else "cuda-event"


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


def input_sets(input_bytes: int, l2_bytes: int | None, max_sets: int = 32, min_sets: int = 1) -> int:
    """How many copies of the inputs to rotate through so that consecutive calls do not find their
    data in L2: enough that the copies together exceed 3x the L2 size; at least ``min_sets`` (an A/B
    arm's calls then sit at several places in memory, :data:`pytest_attn.engine.ab.worker.MIN_INPUT_SETS`)."""
    if not l2_bytes or input_bytes <= 0 or input_bytes >= 3 * l2_bytes:
        return max(1, min_sets)
    return max(1, min_sets, min(max_sets, math.ceil(3 * l2_bytes / input_bytes)))


# ---- the factory -----------------------------------------------------------------------------
@dataclass
class BuiltTimer:
    """A timer ready to sample, and how it got there."""

    timer: Timer
    kind: str
    note: str
    input_sets: int
    capture: str = ""  # graph timers: what the eager-vs-replay check found
    steps: tuple[Step, ...] = ()  # the steps it times, one per rotated input set (the sustained phase's too)

    @property
    def cache_kind(self) -> str:
        """The timer whose cache condition the figures have: for kernel-sum, the graph or events it reads."""
        return str(getattr(getattr(self.timer, "inner", None), "kind", self.kind))


def l2_condition(kind: str, sets: int, set_bytes: int, l2_bytes: int | None) -> str:
    """The cache condition a figure is for, in words."""
    if kind in ("cpu", "cuda-event"):
        return "host caches as they are (CPU)" if kind == "cpu" else \
            "cold L2: a buffer of twice the L2 zeroed before each call"
    mb = 1e6
    l2 = f"L2 {l2_bytes / mb:.0f} MB" if l2_bytes else "L2 size unknown"
    if sets == 1:
        warm = l2_bytes is not None and set_bytes < 3 * l2_bytes
        return (f"cold L2 at each replay; one input set of {set_bytes / mb:.1f} MB reused by every call in it"
                f" ({l2}){': warm between calls' if warm else ''}")
    gap = (sets - 1) * set_bytes
    return (f"cold L2 at each replay; {sets} input sets of {set_bytes / mb:.1f} MB rotated, {gap / mb:.0f} MB between"
            f" two uses of one set ({l2})")


#: What CUDA says when a captured call leaves work on a stream its own stream never waits for, and what that means.
UNJOINED = "unjoined work"
SIDE_STREAM = ("the call leaves work on another stream that its own stream does not wait for (a CUDA graph capture"
               " of it failed: 'capturing stream has unjoined work'): that work is outside the time a pair of events"
               " or a graph reads, and its output may not be ready when it returns. Make the caller's stream wait for"
               " it (torch.cuda.current_stream().wait_stream(side)) before returning")


def build_timer(
    kind: str,
    steps: list[Step],
    call_estimate_s: float,
    flush: Callable[[], None] | None,
    more_sets: Callable[[int], list[Step]],
    pin: TimerPin | None = None,
) -> BuiltTimer:
    """The timer of ``kind`` (from :func:`choose_timer`) over ``steps`` (one per input set; the first is the
    checked one). ``more_sets(n)`` makes up to ``n`` more rotated sets for graph timing (fewer: memory).
    Kernel-sum reads a call of :data:`GRAPH_THRESHOLD_S` or more over events (a graph would only repeat a long
    call). ``pin`` (a baseline's record): its calls per sample, and its input sets where memory allows. Capture
    failures fall back to events, missing CUPTI to the inner timer; the note says so."""
    if kind == "cpu" or flush is None:  # a CPU run, whatever was asked
        return BuiltTimer(CpuTimer(steps), "cpu", "", 1, steps=tuple(steps))
    if kind == "cuda-event":
        note = "short call timed with events: includes host launch overhead" if call_estimate_s < 1e-3 else ""
        return BuiltTimer(CudaEventTimer(steps, flush), kind, note, 1, steps=tuple(steps[:1]))
    over_events = pin.calls_per_sample == 1 if pin is not None and kind == "kernel-sum" \
        else call_estimate_s >= GRAPH_THRESHOLD_S
    if kind == "kernel-sum" and over_events:
        return _kernel_sum(CudaEventTimer(steps[:1], flush), flush, "", 1, "", steps[:1])
    steps = steps + more_sets(len(steps))
    calls = graph_calls_per_replay(call_estimate_s, len(steps), kernel_sum=kind == "kernel-sum")
    if pin is not None and pin.input_sets == len(steps) and pin.calls_per_sample % len(steps) == 0:
        calls = pin.calls_per_sample
    inner: CudaGraphTimer | CudaEventTimer
    note = capture = ""
    try:
        inner = CudaGraphTimer(steps, calls, flush)
        for _ in range(2):  # the first replays upload the graph
            inner.sample()
        capture = check_capture(steps[0], inner)
    except CaptureError:
        raise
    except Exception as exc:  # capture is not possible for every library: fall back, say why
        note = _capture_failed(exc)
        steps = steps[:1]
        inner = CudaEventTimer(steps, flush)
        if kind == "cuda-graph":
            return BuiltTimer(inner, "cuda-event", note + "; timed with events", 1, steps=tuple(steps))
    if kind == "cuda-graph":
        return BuiltTimer(inner, kind, note, len(steps), capture, tuple(steps))
    return _kernel_sum(inner, flush, note, len(steps), capture, steps)


def _capture_failed(exc: Exception) -> str:
    """Why a graph could not be captured, for the note of the events that time the call instead; a call that left
    work on a stream it never joins is not timed at all (:data:`SIDE_STREAM`)."""
    if UNJOINED in str(exc):
        raise CaptureError(SIDE_STREAM) from None
    import torch

    torch.cuda.synchronize()
    return f"graph capture failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"


def _kernel_sum(inner: CudaGraphTimer | CudaEventTimer, flush: Callable[[], None], note: str, sets: int,
                capture: str, steps: Sequence[Step]) -> BuiltTimer:
    try:
        return BuiltTimer(KernelSumTimer(inner, flush), "kernel-sum", note, sets, capture, tuple(steps))
    except Exception as exc:  # no CUPTI (profiler unavailable): the graph or event figure stands
        why = f"the profiler could not read kernel times ({type(exc).__name__}: {exc})"
        return BuiltTimer(inner, inner.kind, "; ".join(filter(None, [note, why])), sets, capture, tuple(steps))
