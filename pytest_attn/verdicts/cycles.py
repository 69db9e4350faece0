"""A verdict in time checked in clock cycles (time x SM clock), where both runs recorded their SM clock
(:mod:`.rule` judges the cycles by the same rule and hands both verdicts here). Pure.

* A SLOWER (FASTER) in time that is not one in cycles is CLOCK: the GPU ran at another clock, not other code.
* Except a SLOWER of a compute-bound case that ran at the power cap, whose cycles are up and not ruled out (not
  SAME): at the cap a kernel that draws more power lowers its own clock, so the clock's fall is no alibi, and the
  time moved beyond what the model's GPUs differ by (the noise holds that spread). It stays SLOWER, saying so. A
  GPU that ran slower at the cap on its own (a hot one) leaves the cycles unchanged: CLOCK. Measured
  (docs/gpu-validation.md#the-stored-baseline-gate): in 37 clean runs on 8 H100s and 13 H200s no case read so;
  with 5 % injected, 0-9 cases a run did, which had read CLOCK.
* A SAME whose clock rose by :data:`CLOCK_STEP` or more while its cycles are slower and not SAME is AMBIGUOUS: a
  faster clock can hide a slower kernel. (A speedup hidden by a slower clock stays SAME: the gate is for slowdowns.)
"""

from __future__ import annotations

from .runs import Bench
from .verdict import Verdict

CLOCK_STEP = 0.01  # an SM clock move under this (about one 15 MHz step at 1.5-2 GHz) is not taken as one


def power_capped(bench: Bench) -> str:
    """The words " with N of M samples at the power cap" when the run's record says so, else nothing."""
    throttle = bench.record.clocks.throttle if bench.record is not None else None
    n = throttle.reasons.get("power cap", 0) if throttle is not None else 0
    return f" with {n} of {throttle.samples} samples at the power cap" if throttle is not None and n else ""


def _clock_note(change: float, cycles_change: float, clock: float, moved: str, c: Bench, noise: float,
                threshold: float) -> str:
    """Why a SLOWER (FASTER) in time is CLOCK: how much of the move the SM clock (``clock``, relative)
    accounts for, and whether the code's own power draw may have lowered it."""
    within = abs(cycles_change) < noise  # nothing left in cycles that noise cannot do
    head = f"{change:+.1%} in time but {cycles_change:+.1%} in clock cycles (time x SM clock)"
    if not within:
        head += f", under the {threshold / 2:.1%} that counts as {'slower' if change > 0 else 'faster'}"
    capped = power_capped(c) if clock < 0 else ""
    if capped:
        return (f"{head}: {moved}{capped}: either the GPU ran slower, or this code draws more power and the cap"
                " lowered its clock (then the code is slower: if this change adds work, gate with"
                " --attn-fail-on=slower,clock)")
    if within:
        return f"{head}: {moved}, so the GPU ran {'slower' if clock < 0 else 'faster'}, not the code"
    return f"{head}: {moved} and took the time over that line; the code's own part is the change in cycles"


def _no_alibi(in_time: Verdict, in_cycles: Verdict, cycles_change: float, clock: float, c: Bench) -> str:
    """The power-cap words where a SLOWER keeps its verdict though its cycles are not SLOWER (see the module)."""
    if in_time != Verdict.SLOWER or in_cycles != Verdict.AMBIGUOUS or cycles_change <= 0 or clock >= 0:
        return ""
    return power_capped(c) if c.bound == "compute" else ""


def consult_cycles(in_time: Verdict, in_cycles: Verdict, change: float, cycles_change: float, base_mhz: float,
                   c: Bench, noise: float, threshold: float) -> tuple[Verdict, str]:
    """The verdict once the clock cycles (judged ``in_cycles``, ``noise`` = Z x sigma) are consulted, and the note
    when they changed it or were overruled ("" when neither; see the module)."""
    clock = c.sm_clock_mhz / base_mhz - 1  # type: ignore[operator]
    moved = f"the SM clock moved {clock:+.1%} ({base_mhz:.0f} -> {c.sm_clock_mhz:.0f} MHz)"
    capped = _no_alibi(in_time, in_cycles, cycles_change, clock, c)
    if capped:
        return Verdict.SLOWER, (
            f"{change:+.1%} in time, {cycles_change:+.1%} in clock cycles (time x SM clock), which do not rule the"
            f" slowdown out: {moved}{capped}, which a kernel drawing more power does to its own clock, and the time"
            " moved beyond what GPUs of the model differ by: SLOWER (a GPU slower on its own keeps its cycles)")
    if in_time in (Verdict.SLOWER, Verdict.FASTER) and in_cycles != in_time:
        return Verdict.CLOCK, _clock_note(change, cycles_change, clock, moved, c, noise, threshold)
    if in_time == Verdict.SAME and clock >= CLOCK_STEP and cycles_change > 0 and in_cycles != Verdict.SAME:
        return Verdict.AMBIGUOUS, (
            f"SAME in time ({change:+.1%}) but {cycles_change:+.1%} in clock cycles (time x SM clock): {moved}, and"
            " a faster clock can hide a slower kernel (one limited by memory, which barely follows the SM clock,"
            " shows more cycles without being slower): rerun, or lock the clocks")
    return in_time, ""
