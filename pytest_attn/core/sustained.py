"""The sustained figure of a case (``--attn-sustained``): its time per call under full load, back to back, once
the SM clock and the power draw have settled -- at the power cap for the kernels that draw the most -- with the
clock, the power and the energy per call. Pure: it reads the readings the engine took
(:mod:`pytest_attn.engine.load_phase`), a list of :class:`Reading`.

A *burst* figure (every other figure of a record) is a few calls after the GPU sat idle, at whatever clock it
boosted to: what a latency-bound decode step at low load sees. A *sustained* one is what prefill and training
throughput see: on an H100 (700 W cap) FA4's Llama-3-8B prefill ran 785 us in a burst and 903 us (+14 %) back to
back, its SM clock down from 1980 to about 1455 MHz.

**Settled.** The phase is cut into windows of :data:`WINDOW_S`; the load has settled at the first window from
which :data:`SETTLE_WINDOWS` windows in a row agree -- their median SM clock within :data:`CLOCK_TOLERANCE`,
median power within :data:`POWER_TOLERANCE` and median time per call within :data:`TIME_TOLERANCE` of the
last of them. The figures are taken over everything from there to the end. A phase that never settles within
its cap is reported over its last third, and says so.

**Energy per call.** From NVML's energy counter (millijoules since the driver loaded,
``nvmlDeviceGetTotalEnergyConsumption``) over the settled part, divided by the calls made in it; a counter
that goes backwards is taken as wrapped where a wrap of 2^32 or 2^64 mJ gives a plausible step (no more than
:data:`MAX_PLAUSIBLE_W` over the step's time), and a step it cannot explain, or a missing counter, is
integrated from the power readings (power x time) instead; the figure says which.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import pairwise

from .stats import median

WINDOW_S = 0.25
SETTLE_WINDOWS = 4
CLOCK_TOLERANCE = 0.015  # about two 15 MHz steps at 1.5 GHz
POWER_TOLERANCE = 0.03
TIME_TOLERANCE = 0.01
WRAPS = (2**32, 2**64)  # an energy counter of 32 or 64 bits, in mJ
MAX_PLAUSIBLE_W = 3000.0  # no one GPU draws more: a step implying more is not a wrap


@dataclass(frozen=True)
class Reading:
    """One replay of the back-to-back graph and what NVML read right after it."""

    t_s: float  # when the replay ended, seconds since the phase began (host clock)
    calls: int  # calls in this replay
    gpu_s: float  # the replay's device time (events)
    sm_clock_mhz: float | None = None
    power_w: float | None = None
    energy_mj: int | None = None  # NVML's cumulative energy counter


@dataclass(frozen=True)
class Window:
    """One :data:`WINDOW_S` of the phase: its medians (the trace the settle rule read, kept in the record)."""

    t_s: float  # the window's start, seconds since the phase began
    per_call_s: float
    sm_clock_mhz: float | None
    power_w: float | None


@dataclass(frozen=True)
class Sustained:
    """The sustained figures of one case (see the module's docstring)."""

    phase_s: float  # the whole phase, settling included
    settled: bool
    settled_after_s: float | None  # when the load settled (None: it did not within the cap)
    calls: int  # calls in the part the figures are over
    median_s: float  # time per call there: the median over its replays of device time / calls
    sm_clock_mhz: float | None
    power_w: float | None
    energy_per_call_j: float | None
    energy_source: str  # "energy counter", "power x time", or "not known"
    tflops: float
    tflops_per_j: float | None  # TFLOP per joule: FLOPs per call / energy per call / 1e12
    mfu: float | None  # against the datasheet peak, as the burst MFU
    burst_ratio: float | None  # sustained / burst time per call (1.14: 14 % slower under load)
    note: str = ""
    replayed: str = ""  # how the calls ran back to back ("a CUDA graph of 64 calls")
    trace: tuple[Window, ...] = ()  # the phase window by window: what the clock, power and time per call did

    def describe(self) -> str:
        clock = f" at {self.sm_clock_mhz:.0f} MHz" if self.sm_clock_mhz else ""
        power = f", {self.power_w:.0f} W" if self.power_w else ""
        energy = f", {self.energy_per_call_j * 1e3:.3g} mJ a call ({self.energy_source})" \
            if self.energy_per_call_j is not None else ""
        when = f"settled after {self.settled_after_s:.1f} s" if self.settled else \
            f"never settled in {self.phase_s:.1f} s (its last third)"
        return f"{self.median_s * 1e6:.4g} us a call{clock}{power}{energy}; {when}"


def _windows(readings: Sequence[Reading]) -> list[list[Reading]]:
    out: list[list[Reading]] = []
    for r in readings:
        index = int(r.t_s // WINDOW_S)
        while len(out) <= index:
            out.append([])
        out[index].append(r)
    return [w for w in out if w]


def _per_call(r: Reading) -> float:
    return r.gpu_s / r.calls


def _began(r: Reading) -> float:
    """When the replay began (its end, less its device time)."""
    return r.t_s - r.gpu_s


def _center(window: Sequence[Reading], field: str) -> float | None:
    values = [v for r in window if (v := (_per_call(r) if field == "time" else getattr(r, field))) is not None]
    return median(values) if values else None


def _agree(a: float | None, b: float | None, tolerance: float) -> bool:
    return a is None or b is None or abs(a - b) <= tolerance * abs(b)


def settled_at(readings: Sequence[Reading]) -> float | None:
    """When the load settled (the start of the first of :data:`SETTLE_WINDOWS` agreeing windows), or None."""
    windows = _windows(readings)
    fields = (("sm_clock_mhz", CLOCK_TOLERANCE), ("power_w", POWER_TOLERANCE), ("time", TIME_TOLERANCE))
    for i in range(len(windows) - SETTLE_WINDOWS + 1):
        run = windows[i:i + SETTLE_WINDOWS]
        last = run[-1]
        if all(_agree(_center(w, f), _center(last, f), tol) for w in run for f, tol in fields):
            return _began(run[0][0])
    return None


def energy_j(readings: Sequence[Reading]) -> tuple[float | None, str]:
    """The energy over ``readings`` (from the first reading to the last), and where it came from."""
    total, source = 0.0, "energy counter"
    for a, b in pairwise(readings):
        step_s = max(b.t_s - a.t_s, 1e-9)
        joules = None
        if a.energy_mj is not None and b.energy_mj is not None:
            delta = b.energy_mj - a.energy_mj
            for wrap in ((0,) if delta >= 0 else WRAPS):
                if 0 <= delta + wrap <= MAX_PLAUSIBLE_W * step_s * 1e3:
                    joules = (delta + wrap) / 1e3
                    break
        if joules is None:  # no counter, or a step it cannot explain: the power readings, integrated
            powers = [p for p in (a.power_w, b.power_w) if p is not None]
            if not powers:
                return None, "not known"
            joules = sum(powers) / len(powers) * step_s
            source = "power x time"
        total += joules
    return (total, source) if len(readings) > 1 else (None, "not known")


def sustained(readings: Sequence[Reading], flops_per_call: float, burst_median_s: float | None,
              peak_tflops: float | None) -> Sustained:
    """The sustained figures of a phase's readings (at least two)."""
    if len(readings) < 2:
        raise ValueError("a sustained phase needs two readings or more")
    phase_s = readings[-1].t_s
    start = settled_at(readings)
    note = ""
    windows = trace(readings)
    if start is None:
        start = phase_s * 2 / 3
        note = (f"the SM clock, the power or the time per call did not settle within {phase_s:.1f} s"
                f"{spread([w for w in windows if w.t_s >= start])}: the figures are over its last third (a longer"
                " --attn-sustained=SECONDS may let it settle)")
    part = [r for r in readings if _began(r) >= start - 1e-12]
    if len(part) < 2:
        part = list(readings[-2:])
    calls = sum(r.calls for r in part[1:])  # the energy is counted from the first reading of the part on
    time_per_call = median([_per_call(r) for r in part])
    clocks = [r.sm_clock_mhz for r in part if r.sm_clock_mhz is not None]
    powers = [r.power_w for r in part if r.power_w is not None]
    joules, source = energy_j(part)
    per_call_j = joules / calls if joules is not None and calls else None
    tflops = flops_per_call / time_per_call / 1e12
    return Sustained(
        phase_s=phase_s, settled=not note, settled_after_s=None if note else start, calls=calls,
        median_s=time_per_call, sm_clock_mhz=median(clocks) if clocks else None,
        power_w=median(powers) if powers else None, energy_per_call_j=per_call_j,
        energy_source=source if per_call_j is not None else "not known", tflops=tflops,
        tflops_per_j=flops_per_call / per_call_j / 1e12 if per_call_j else None,
        mfu=tflops / peak_tflops if peak_tflops else None,
        burst_ratio=time_per_call / burst_median_s if burst_median_s else None, note=note, trace=windows)


def trace(readings: Sequence[Reading]) -> tuple[Window, ...]:
    """The phase window by window (:data:`WINDOW_S`; windows without a reading left out): medians of each."""
    return tuple(Window(int(w[0].t_s // WINDOW_S) * WINDOW_S, _center(w, "time") or 0.0, _center(w, "sm_clock_mhz"),
                        _center(w, "power_w")) for w in _windows(readings))


def spread(windows: Sequence[Window]) -> str:
    """How far apart the windows' medians were, in words (", its windows' SM clock 1410-1470 MHz, ..."), or ""."""
    if len(windows) < 2:
        return ""
    times = [w.per_call_s for w in windows]
    parts = [f"time per call {min(times) * 1e6:.4g}-{max(times) * 1e6:.4g} us"]
    clocks = [w.sm_clock_mhz for w in windows if w.sm_clock_mhz is not None]
    powers = [w.power_w for w in windows if w.power_w is not None]
    if clocks:
        parts.append(f"SM clock {min(clocks):.0f}-{max(clocks):.0f} MHz")
    if powers:
        parts.append(f"power {min(powers):.0f}-{max(powers):.0f} W")
    return f" (its last {len(windows)} windows of {WINDOW_S:g} s: {', '.join(parts)})"


def ranking_change(groups: dict[str, list[tuple[str, float, float]]]) -> list[str]:
    """Per problem, the back ends as (name, burst time, sustained time): a sentence where the order under
    sustained load differs from the burst order."""
    lines = []
    for group, rows in groups.items():
        if len(rows) < 2:
            continue
        burst = [name for name, b, _ in sorted(rows, key=lambda r: r[1])]
        loaded = [name for name, _, s in sorted(rows, key=lambda r: r[2])]
        if burst != loaded:
            times = {name: s for name, _, s in rows}
            lines.append(f"{group}: under sustained load the order is {', '.join(loaded)}"
                         f" ({', '.join(f'{times[n] * 1e6:.4g} us' for n in loaded)}); in a burst it was"
                         f" {', '.join(burst)}")
    return lines
