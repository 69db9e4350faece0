"""What the engine reads beside the timers: device activity through CUPTI (the PyTorch profiler),
the kernels one call launches, the profiler's kernel time for ``--attn-verify-timing``, quick event
timings for calibrations, NVTX ranges around each case's warm-up and samples (named by test id, so
``nsys profile`` shows which kernels belong to which case), one Chrome trace per case
(``--attn-trace-dir``), and the peak memory one call allocates beyond its inputs. GPU I/O; torch is
imported inside each function."""

from __future__ import annotations

import contextlib
import warnings
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

from ..core.kernel_names import KernelCall, is_kernel, summarize


def device_activity(run: Callable[[], Any]) -> list[tuple[str, float]]:
    """(name, seconds) of every kernel, memset and memcpy that ``run()`` put on the GPU, as CUPTI
    records them through ``torch.profiler`` (device timestamps: no host time, no launch gaps), in the
    order they started on the GPU."""
    import torch
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message=".*Profiler clears events.*")
        with profile(activities=[ProfilerActivity.CUDA]) as prof:
            run()
            torch.cuda.synchronize()
    timed = [(e.time_range.start, e.name, e.time_range.elapsed_us() / 1e6)
             for e in prof.events() if e.device_type == DeviceType.CUDA]
    return [(name, sec) for _, name, sec in sorted(timed, key=lambda x: x[0])]


def split_samples(activity: list[tuple[str, float]], skip: set[str], samples: int) -> list[float] | None:
    """Each sample's device seconds, from the activity of ``samples`` identical samples traced together (a CUDA
    graph replays the same kernels in the same order): the activity not named in ``skip`` (the L2 flush), cut
    into ``samples`` equal runs. None where it cannot be cut so -- a count that does not divide, or runs whose
    kernel names differ -- and the caller traces its samples one by one. Pure."""
    kept = [(name, sec) for name, sec in activity if name not in skip]
    if samples < 1 or not kept or len(kept) % samples:
        return None
    size = len(kept) // samples
    runs = [kept[i * size:(i + 1) * size] for i in range(samples)]
    names = [name for name, _ in runs[0]]
    if any([name for name, _ in run] != names for run in runs[1:]):
        return None
    return [sum(sec for _, sec in run) for run in runs]


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


def device_seconds(fn: Callable[[], Any], reps: int, trials: int = 3, warm: bool = True) -> float:
    """Device time of one call of ``fn`` -- the sum of its kernels', memsets' and copies' durations, as
    the kernel-sum timer reads them (no launch overhead, no gaps) -- the least over ``trials`` runs of
    ``reps`` calls, after one warm call unless ``warm`` is False (for the deliberate slowdown's calibration)."""
    import torch

    if warm:
        fn()
        torch.cuda.synchronize()
    return min(sum(sec for _, sec in device_activity(lambda: [fn() for _ in range(reps)])) / reps
               for _ in range(trials))


def profile_kernels(fn: Callable[[], Any]) -> list[KernelCall]:
    """Run ``fn`` once under the PyTorch profiler (CUPTI) and return the kernels it launched."""
    import torch

    torch.cuda.synchronize()
    return summarize(name for name, _ in device_activity(fn) if is_kernel(name))


def profiled_kernel_time(timer: Any, flush: Callable[[], Any] | None, samples: int = 3) -> float:
    """Kernel time per call of ``samples`` samples of ``timer`` (for kernel-sum, of its inner graph or
    event timer), read by the profiler, leaving out the L2-flush kernels (``--attn-verify-timing``)."""
    flush_names = {name for name, _ in device_activity(flush)} if flush is not None else set()
    base = getattr(timer, "inner", timer)
    activity = device_activity(lambda: [base.sample() for _ in range(samples)])
    busy = sum(sec for name, sec in activity if name not in flush_names)
    return busy / (samples * base.calls_per_sample)


def _nvtx() -> Any:
    import torch

    return torch.cuda.nvtx


#: Where NVTX calls go (tests replace it with a recorder).
NVTX: Callable[[], Any] = _nvtx


@contextlib.contextmanager
def nvtx_range(name: str, enabled: bool) -> Iterator[None]:
    """``range_push(name)`` ... ``range_pop()`` when ``enabled`` (a CUDA run); nothing otherwise."""
    if not enabled:
        yield
        return
    nvtx = NVTX()
    nvtx.range_push(name)
    try:
        yield
    finally:
        nvtx.range_pop()


def peak_memory_bytes(step: Callable[[], Any], cuda: Any = None) -> int:
    """Device memory one call of ``step`` allocates at its peak beyond what was allocated before it
    (its output included; its inputs, already allocated, not)."""
    if cuda is None:
        import torch

        cuda = torch.cuda
    cuda.synchronize()
    before = cuda.memory_allocated()
    cuda.reset_peak_memory_stats()
    out = step()
    cuda.synchronize()
    peak = cuda.max_memory_allocated()
    del out
    return max(0, peak - before)


def write_trace(step: Callable[[], Any], path: Path, calls: int = 3) -> Path:
    """A Chrome trace (chrome://tracing, Perfetto) of ``calls`` calls of ``step``."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    path.parent.mkdir(parents=True, exist_ok=True)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if torch.cuda.is_available() else [])
    with profile(activities=activities) as prof:
        for _ in range(calls):
            step()
        if torch.cuda.is_available():
            torch.cuda.synchronize()
    prof.export_chrome_trace(str(path))
    return path
