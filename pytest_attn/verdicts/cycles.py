"""A verdict in time checked in clock cycles (time x SM clock), where both runs recorded their SM clock
(:mod:`.rule` judges the cycles by the same rule and hands both verdicts here). Pure.

* A SLOWER (FASTER) in time that is not one in cycles is CLOCK: the GPU ran at another clock, not other code. At
  the power cap that cannot be told from code that draws more power and lowers its own clock, and the note says
  so (``--attn-fail-on=slower,clock`` gates it). Calling such a case SLOWER when its cycles were up but not ruled
  out caught 3-9 more cases a run with 5 % injected, and failed unchanged code on an H200 outside the baseline
  (FA4 Llama-3-8B prefill fwd: +5.4 % in time, +2.6 % in cycles, the clock 2.4 % lower, every sample at the cap;
  docs/gpu-validation.md#the-stored-baseline-gate): withdrawn.
* A SAME whose clock rose by :data:`CLOCK_STEP` or more while its cycles are slower and not SAME is AMBIGUOUS: a
  faster clock can hide a slower kernel. (A speedup hidden by a slower clock stays SAME: the gate is for slowdowns.)
* An AMBIGUOUS of a compute-bound case that rose by half the threshold or more in time, at a clock :data:`CLOCK_STEP`
  or more above the baseline's, and is SLOWER in cycles is SLOWER: it took longer at a faster clock. Not for a
  memory-bound case, whose cycles follow the clock without its time: judged so with neither condition, FA4's decode
  at 64 x 32,768 keys read SLOWER on unchanged code in 11 of 31 stored H200 runs (-1.7 to +2.1 % in time). Replayed on
  every stored run, each host left out of its baseline: 1-8 more SLOWER a run with 5 % injected, none in the 47
  clean runs of H100s and H200s (docs/gpu-validation.md#the-stored-baseline-gate).
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


def consult_cycles(in_time: Verdict, in_cycles: Verdict, change: float, cycles_change: float, base_mhz: float,
                   c: Bench, noise: float, threshold: float) -> tuple[Verdict, str]:
    """The verdict once the clock cycles (judged ``in_cycles``, ``noise`` = Z x sigma) are consulted, and the note
    when they changed it ("" when they did not; see the module)."""
    clock = c.sm_clock_mhz / base_mhz - 1  # type: ignore[operator]
    moved = f"the SM clock moved {clock:+.1%} ({base_mhz:.0f} -> {c.sm_clock_mhz:.0f} MHz)"
    if in_time in (Verdict.SLOWER, Verdict.FASTER) and in_cycles != in_time:
        return Verdict.CLOCK, _clock_note(change, cycles_change, clock, moved, c, noise, threshold)
    if in_time == Verdict.AMBIGUOUS and in_cycles == Verdict.SLOWER and clock >= CLOCK_STEP and \
            change >= threshold / 2 and c.bound == "compute":
        return Verdict.SLOWER, (
            f"{change:+.1%} in time, within its noise, but {cycles_change:+.1%} in clock cycles (time x SM clock):"
            f" {moved}, and this case is bound by compute, so it took longer at a faster clock: slower code, the clock"
            " hiding part of it")
    if in_time == Verdict.SAME and clock >= CLOCK_STEP and cycles_change > 0 and in_cycles != Verdict.SAME:
        return Verdict.AMBIGUOUS, (
            f"SAME in time ({change:+.1%}) but {cycles_change:+.1%} in clock cycles (time x SM clock): {moved}, and"
            " a faster clock can hide a slower kernel (one limited by memory, which barely follows the SM clock,"
            " shows more cycles without being slower): rerun, or lock the clocks")
    return in_time, ""
