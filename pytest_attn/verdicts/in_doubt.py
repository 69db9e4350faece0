"""A second look (``--attn-second-look``): the cases the gate would leave in doubt (AMBIGUOUS, CLOCK) measured again
in a fresh process on the GPU that measured them, each then gated on its two runs as ``pytest-attn merge --reruns``
gates a pair. Pure: which cases, and a case's two records as one; :mod:`pytest_attn.plugin.second_look` runs the
process.

Why: on H200s outside the baseline a 5 % slowdown read SLOWER on 191-197 of the committed selection's 206 cases in one
run, the rest AMBIGUOUS or CLOCK. Replayed on the stored pairs of those runs (each run's doubtful cases gated on it and
its rerun), 197-200 read SLOWER, and four clean runs stayed at 0 SLOWER, 0 FASTER; then run so on another H200: 201 and
199 (the first looks alone: 196 and 192), and twice 0, 0 (docs/gpu-validation.md#the-stored-baseline-gate). A fresh
process, not this one again: each of the baseline's repeats is a process of its own, and the run-to-run noise the gate
uses is the spread between them.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence

from ..core.record import Record
from ..core.stats import OUTLIER_FACTOR, times_off
from .render import verdict_counts
from .rule import Comparison
from .verdict import Verdict

DOUBTFUL = (Verdict.AMBIGUOUS, Verdict.CLOCK)
#: At most this share of the compared cases is measured again (at least :data:`AT_LEAST`): where more are in doubt the
#: machine is noisier than a second look settles, and the run would take twice as long.
SHARE = 0.25
AT_LEAST = 8


def chosen(comparisons: Sequence[Comparison]) -> tuple[list[str], int]:
    """The names of the doubtful cases to measure again, the largest slowdown first, at most :data:`AT_LEAST` or
    :data:`SHARE` of the compared cases, whichever is more; and how many were in doubt."""
    compared = [c for c in comparisons if c.baseline is not None and c.current is not None and c.change is not None]
    doubtful = sorted((c for c in compared if c.verdict in DOUBTFUL), key=lambda c: -(c.change or 0.0))
    limit = max(AT_LEAST, math.ceil(SHARE * len(compared)))
    return [c.name for c in doubtful[:limit]], len(doubtful)


def combined(first: Record, again: Record) -> tuple[Record | None, str]:
    """``first`` with its own and ``again``'s median as two repeats (each with its GPU and SM clock), as ``baseline
    add`` and ``merge --reruns`` keep repeats: the gate then judges their centre with the noise of two runs; the rest
    of the record (samples, figures) stays the first run's. (None, why) where ``again`` cannot be a repeat of
    ``first``: taken by another timer, or more than :data:`~pytest_attn.core.stats.OUTLIER_FACTOR` times off."""
    if first.timing.pin != again.timing.pin:
        return None, (f"{first.name}: measured again by {again.timing.pin.describe()}, first by"
                      f" {first.timing.pin.describe()} (a repeat must be the same quantity)")
    if times_off(again.median_s, first.median_s) > OUTLIER_FACTOR:
        return None, (f"{first.name}: {again.median_s * 1e3:.4g} ms again against {first.median_s * 1e3:.4g} ms"
                      " first, too far apart to be two runs of one thing (a busy machine, a throttled GPU?)")
    clocks = (first.clocks.sm_clock_mhz, again.clocks.sm_clock_mhz)
    timing = dataclasses.replace(first.timing, repeats_s=(first.median_s, again.median_s),
                                 repeats_gpu=(first.device.uuid or "", again.device.uuid or ""))
    known = tuple(c for c in clocks if c)
    return dataclasses.replace(first, timing=timing, clocks=dataclasses.replace(
        first.clocks, repeats_sm_clock_mhz=known if len(known) == 2 else ())), ""


def after_line(names: Sequence[str], comparisons: Sequence[Comparison]) -> str:
    """What the cases measured again read once gated on both runs: "second look: on both runs, the 14 case(s) measured
    again read 5 SLOWER, 5 CLOCK, 4 AMBIGUOUS" (in the gate's order: the failing kinds first)."""
    again = set(names)
    said = verdict_counts((c.verdict.value for c in comparisons if c.name in again), "nothing")
    return f"second look: on both runs, the {len(again)} case(s) measured again read {said}"
