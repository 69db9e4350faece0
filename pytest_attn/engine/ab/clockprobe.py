"""A block's mean SM clock, read on the GPU: a small kernel run before and after the block reads each SM's
cycle counter (``%clock64``) and the GPU's nanosecond timer (``%globaltimer``); cycles over nanoseconds, SM by
SM, is the clock each SM ran at over the block, and the median over the SMs is the block's.

Why not NVML: its SM clock is one reading at one instant, in 15 MHz steps, and at a power cap the clock moves
within a block: two arms of one process, same code and data in different places in memory, ran 2-3 % apart in
time and within 0.4 % in cycles, of which NVML saw about half (docs/gpu-validation.md#the-paired-ab). The A/B
arms judge at equal clock where every block has this clock (:func:`pytest_attn.verdicts.ab.paired.paired`).

The readings go to two buffers made once: with a fresh buffer per reading, an H200 run once hit an illegal
memory access in an arm (the cause was not established).

The kernel is Triton's (it comes with torch's CUDA wheels); where Triton is missing or cannot build it,
:func:`open_probe` says why and the arms fall back to NVML's readings.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from ...core.stats import median

#: Probe blocks per SM, so that every SM runs at least one (the scheduler spreads them).
CTAS_PER_SM = 4
#: The probe's clock must come out in this range (MHz) to be believed: a counter that stops while the SM
#: idles, or a timer of another unit, would fail it.
PLAUSIBLE_MHZ = (100.0, 5000.0)

tl: Any = None  # triton.language, bound by _kernel() the first time a probe is built
_KERNEL: Any = None


def mean_clock_mhz(start: Iterable[Sequence[int]], end: Iterable[Sequence[int]]) -> float | None:
    """The median over SMs of (cycles elapsed) / (nanoseconds elapsed) x 1000, from two probe readings of
    ``(sm, cycle counter, globaltimer ns)`` rows; an SM is used where both readings have it (its first row
    of each). None where no SM has two readings a positive time apart. Pure."""
    first: dict[int, tuple[int, int]] = {}
    for sm, cycles, ns in start:
        first.setdefault(int(sm), (int(cycles), int(ns)))
    rates: dict[int, float] = {}
    for sm, cycles, ns in end:
        sm = int(sm)
        if sm in rates or sm not in first:
            continue
        c0, t0 = first[sm]
        if int(ns) > t0 and int(cycles) >= c0:
            rates[sm] = (int(cycles) - c0) / (int(ns) - t0) * 1e3
    return median(list(rates.values())) if rates else None


def _probe_kernel(out):  # type: ignore[no-untyped-def]  # Triton compiles it (_kernel): no annotations
    # each program writes one row: its SM, the SM's cycle counter, the GPU's timer
    pid = tl.program_id(0)
    sm = tl.inline_asm_elementwise("mov.u32 $0, %smid;", "=r", [], dtype=tl.int32, is_pure=False, pack=1)
    cycles = tl.inline_asm_elementwise("mov.u64 $0, %clock64;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    ns = tl.inline_asm_elementwise("mov.u64 $0, %globaltimer;", "=l", [], dtype=tl.int64, is_pure=False, pack=1)
    tl.store(out + pid * 3, sm.to(tl.int64))
    tl.store(out + pid * 3 + 1, cycles)
    tl.store(out + pid * 3 + 2, ns)


def _kernel() -> Any:
    global tl, _KERNEL
    if _KERNEL is None:
        import triton
        import triton.language

        tl = triton.language
        _KERNEL = triton.jit(_probe_kernel)
    return _KERNEL


class SmClockProbe:
    """Readings of every SM's cycle counter and timer, on the current stream; :meth:`mean_mhz` of two. The
    readings go to two buffers made once (a block allocates nothing), used in turn."""

    def __init__(self, sm_count: int) -> None:
        import torch

        self.programs = CTAS_PER_SM * max(1, sm_count)
        self._kernel = _kernel()
        self._rows = [torch.zeros(self.programs * 3, dtype=torch.int64, device="cuda") for _ in range(2)]
        self._next = 0

    def mark(self) -> Any:
        """Launch a reading into the next buffer; it runs after the work queued before it (no waiting here)."""
        rows = self._rows[self._next]
        self._next = 1 - self._next
        self._kernel[(self.programs,)](rows, num_warps=1)
        return rows

    def mean_mhz(self, start: Any, end: Any) -> float | None:
        """The mean SM clock between two readings (waits for the second)."""
        return mean_clock_mhz(start.view(-1, 3).tolist(), end.view(-1, 3).tolist())


def open_probe(sm_count: int) -> tuple[SmClockProbe | None, str]:
    """A probe that has read a plausible clock once, or None and why not."""
    try:
        probe = SmClockProbe(sm_count)
        start = probe.mark()
        import torch

        torch.cuda._sleep(1_000_000)  # a million cycles between the readings: ~0.5 ms at 2 GHz
        mhz = probe.mean_mhz(start, probe.mark())
    except Exception as exc:  # no Triton, no compiler for this GPU: NVML's readings instead
        return None, f"the SM clock probe could not run ({type(exc).__name__}: {str(exc)[:200]}); NVML's readings"
    if mhz is None or not PLAUSIBLE_MHZ[0] <= mhz <= PLAUSIBLE_MHZ[1]:
        return None, f"the SM clock probe read {mhz} MHz, not believed; NVML's readings"
    return probe, f"mean SM clock per block from each SM's cycle counter (read {mhz:.0f} MHz at start)"
