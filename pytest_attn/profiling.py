"""Hooks for profilers and memory: NVTX ranges around each case's warm-up and samples (named by test
id, so ``nsys profile`` shows which kernels belong to which case), one PyTorch-profiler Chrome
trace per case (``--attn-trace-dir``), and the peak memory one call allocates beyond its inputs."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any


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
