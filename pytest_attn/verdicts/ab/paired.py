"""Paired A/B verdicts: two arms (two builds of a kernel, two back ends) measured on one GPU in alternating
blocks of samples, each block of arm B beside one of arm A in time. Pure.

A run-vs-baseline comparison fights noise *between* runs -- another day's clock, power cap, temperature --
and resolves about 5 %. Pairing takes it out: the blocks of a pair ran within the same second or two, so
whatever the clock did to one it did to the other, and only the arms' difference is left in their ratio.
Per case the verdict is the gate's rule (:func:`~pytest_attn.verdicts.rule.verdict`) applied to the geometric
mean of the pairs' ratios B/A, with the standard error of the mean log ratio as the noise: at the A/B
threshold (:data:`AB_THRESHOLD`, 2 %), SLOWER once the change is beyond both three standard errors and
:data:`AB_LEAST` of the threshold (1.25 %). Where every block's clock was read on the GPU
(:mod:`pytest_attn.engine.ab.clockprobe`) the ratios are of time at equal SM clock, else of time: at a power cap
the clock is not shared by a pair -- it moves from block to block, and an arm whose data sit elsewhere in
memory can draw more power and run at a lower clock all along. How far a case's time follows the clock is
fitted on its own pairs (:func:`~pytest_attn.core.stats.clock_sensitivity`): a compute-bound kernel's time
goes with 1/clock (its cycles are fixed), a memory-bound decode step's does not (its time is fixed); judged in
cycles alone, both kinds were misjudged on an H100 (docs/gpu-validation.md#the-paired-ab). Time and cycles are
reported beside it.

``tests/test_paired.py`` simulates a clock whose speed drifts +-5 % over a run: paired, a 2 % difference
is SLOWER in 200 of 200 cases and an A/A never is; the same blocks compared run against run are not
(drift lands in the difference). It also simulates a power-capped GPU whose clock jitters block by block
and sits lower for one arm's placement: judged in time, an A/A is called; in measured cycles, never.

The blocks come from ``--attn-ab`` (:mod:`pytest_attn.engine.ab.pairing`); :class:`AbResult` is one case's
outcome, as the summary, the reports (:mod:`.summaries`) and pytest-xdist's hand-over carry it.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from ...core.stats import (
    at_equal_clock,
    median,
    placement_variance,
    stratified_log_ratio,
    stratum_means,
    t_quantile,
    t_widening,
    without_outliers,
)
from ..cycles import CLOCK_STEP
from ..rule import Z, verdict

AB_THRESHOLD = 0.02
#: The smallest change a paired A/B calls SLOWER or FASTER, as a fraction of its threshold (1.25 % at 2 %; the
#: stored-baseline gate takes half): with half, an H100 A/A read +1.10 % beyond its noise, and no 2 % slowdown
#: read under +1.36 % (replayed over 53 reports: docs/gpu-validation.md#the-paired-ab).
AB_LEAST = 0.625
#: A clock this much apart between the arms is noted (pairing saw the same seconds: the kernel's own doing).
CLOCK_NOTE = 0.01
#: Replicas of the arms whose changes are this far apart are noted (where a process sits moved the case).
REPLICA_NOTE = 0.01
#: Pairs left out as stalls beyond one and beyond this share of a case's pairs make it AMBIGUOUS: the machine's
#: speed moved under the arms. None of 19,456 stored GPU judgements left a pair out; a CPU A/A on a 2-core machine
#: left out 38 of 52 and read FASTER -63 % on what remained (docs/ab.md, "On a CPU it is not a gate").
MOST_STALLS = 0.1


@dataclass(frozen=True)
class Paired:
    """One case's paired comparison: ``change`` = B/A - 1 (the geometric mean over pairs)."""

    name: str
    pairs: int
    change: float
    sigma: float  # the standard error of the mean log ratio (relative)
    verdict: str
    dropped: int = 0  # pairs whose ratio was over twice or under half the median ratio (core.stats.without_outliers)
    in_time: str = ""  # the time's own verdict, where the basis is not time or the clock rule changed it
    #: what change and sigma are of: "time", or "equal clock" (time x each block's mean SM clock ** the case's
    #: clock sensitivity); "cycles" in records written before the sensitivity was fitted (it was 1 there)
    basis: str = "time"
    time_change: float | None = None  # B/A - 1 in time, where the basis is not time
    clock_sensitivity: float | None = None  # how far time follows the clock (0-1; 1: cycles), on that basis

    @property
    def in_time_change(self) -> float:
        """B/A - 1 in time, whatever the basis."""
        return self.change if self.time_change is None else self.time_change

    def settled(self, threshold: float) -> bool:
        """Whether pairs at one set-up of each replica may stop at this verdict: SAME by under a quarter of the
        threshold, or SLOWER or FASTER by the threshold or more. Two draws of place per arm can agree by chance,
        either way (on fake arms whose places move a case, tests/test_ab.py). Anything else is measured on at new
        places (:mod:`pytest_attn.engine.ab.pairing`)."""
        if self.verdict == "SAME":
            return abs(self.change) < threshold / 4
        return self.verdict in ("SLOWER", "FASTER") and abs(self.change) >= threshold

    def interval(self) -> tuple[float, float]:
        """The change's 95 % confidence interval (Student's t on the mean log ratio), on its basis."""
        centre = math.log1p(self.change)
        half = t_quantile(0.975, self.pairs - 1) * self.sigma if self.pairs > 1 else math.inf
        return math.expm1(centre - half), math.expm1(centre + half)


def paired(name: str, a_s: Sequence[float], b_s: Sequence[float], threshold: float = AB_THRESHOLD,
           a_mhz: Sequence[float | None] = (), b_mhz: Sequence[float | None] = (), measured: bool = False,
           replicas: Sequence[int] = ()) -> Paired:
    """The verdict on ``b_s`` against ``a_s``: block times (seconds) of arm A and arm B, pair by pair in
    the order they ran. Fewer than two pairs cannot say how noisy the ratio is: AMBIGUOUS unless SAME is
    impossible to miss.

    ``replicas``: which of each arm's processes took each pair (:mod:`pytest_attn.engine.ab.pairing`). The
    change is the mean of the replicas' mean log ratios, its noise the spread within each replica
    (:func:`~pytest_attn.core.stats.stratified_log_ratio`, widened for few pairs) plus what the replicas
    differ by beyond that (:func:`~pytest_attn.core.stats.placement_variance`): where a process's data sit
    moves some cases by a draw of their own, which more pairs do not average away (an H100 A/A's replicas read
    one case +0.04 % and +2.30 %: docs/gpu-validation.md#the-paired-ab).

    ``measured``: ``a_mhz``, ``b_mhz`` are each block's mean SM clock read on the GPU: judged at equal clock
    (:func:`_at_equal_clock`), the time's verdict in ``in_time`` and its change in ``time_change``.

    With every block's SM clock (``a_mhz``, ``b_mhz``), a SAME is AMBIGUOUS where B's clock was
    :data:`~pytest_attn.verdicts.cycles.CLOCK_STEP` or more above A's and B is slower and not SAME in cycles
    (block time x its clock) -- the gate's rule: a faster clock can hide a slower kernel (work that draws less
    power than attention lets a power-capped clock up)."""
    if len(a_s) != len(b_s) or not a_s:
        raise ValueError(f"{name}: {len(a_s)} blocks of A against {len(b_s)} of B; pair them one to one")
    if any(not (x > 0 and math.isfinite(x)) for x in (*a_s, *b_s)):
        raise ValueError(f"{name}: block times must be finite and positive")
    if replicas and len(replicas) != len(a_s):
        raise ValueError(f"{name}: {len(replicas)} replica labels for {len(a_s)} pairs")
    ratios = [b / a for a, b in zip(a_s, b_s, strict=True)]
    kept = [i for i, r in enumerate(ratios) if r in without_outliers(ratios)[0]]  # a block the OS stalled
    result = _paired_kept(name, a_s, b_s, kept, threshold, a_mhz, b_mhz, measured, replicas)
    if unsteady(len(a_s), result.dropped) and result.verdict != "AMBIGUOUS":
        return dataclasses.replace(result, verdict="AMBIGUOUS")  # its note says why (AbResult.notes)
    return result


def unsteady(pairs: int, dropped: int) -> bool:
    """Whether more pairs were left out than stalls explain: more than one, and more than :data:`MOST_STALLS` of
    them."""
    return dropped > max(1, int(pairs * MOST_STALLS))


def _paired_kept(name: str, a_s: Sequence[float], b_s: Sequence[float], kept: Sequence[int], threshold: float,
                 a_mhz: Sequence[float | None], b_mhz: Sequence[float | None], measured: bool,
                 replicas: Sequence[int]) -> Paired:
    """:func:`paired` on the pairs ``kept``."""
    a_k, b_k = [a_s[i] for i in kept], [b_s[i] for i in kept]
    strata = [replicas[i] for i in kept] if replicas else []
    widen = few_pairs_factor(len(kept) - max(0, len(set(strata)) - 1))
    change, sigma, noise = _judged(a_k, b_k, strata, widen)
    in_time = verdict(change, noise, threshold, AB_LEAST)
    result = Paired(name, len(kept), change, sigma, in_time, dropped=len(a_s) - len(kept))
    ma = _clocks([a_mhz[i] for i in kept if i < len(a_mhz)], len(kept))  # the kept blocks' clocks, all or none
    mb = _clocks([b_mhz[i] for i in kept if i < len(b_mhz)], len(kept))
    if ma and mb and measured:
        s, level, sigma_e, noise_e = _at_equal_clock(a_k, b_k, ma, mb, strata, widen)
        return Paired(name, len(kept), level, sigma_e, verdict(level, noise_e, threshold, AB_LEAST), result.dropped,
                      in_time=in_time, basis="equal clock", time_change=change, clock_sensitivity=s)
    if in_time != "SAME" or not ma or not mb:
        return result
    clock = median(mb) / median(ma) - 1
    cycles, _, noise_c = _judged(*_in_cycles(a_k, b_k, ma, mb), strata, widen)
    if clock >= CLOCK_STEP and cycles > 0 and verdict(cycles, noise_c, threshold, AB_LEAST) != "SAME":
        return dataclasses.replace(result, verdict="AMBIGUOUS", in_time=in_time)
    return result


def _at_equal_clock(a: Sequence[float], b: Sequence[float], a_mhz: Sequence[float], b_mhz: Sequence[float],
                    strata: Sequence[int], widen: float) -> tuple[float, float, float, float]:
    """(clock sensitivity, change, standard error, the rule's noise) of the pairs at equal SM clock: block time
    x its clock ** ``s``, ``s`` the case's clock sensitivity fitted on the pairs (1 where the clocks did not vary
    within a replica); the fit's own error (at most 1: ``s`` lies in 0..1), times the arms' mean clock
    difference, joins the error."""
    a_e, b_e, s, s_error = at_equal_clock(a, b, a_mhz, b_mhz, strata)
    level, sigma, noise = _judged(a_e, b_e, strata, widen)
    fit = min(s_error, 1.0) * abs(sum(math.log(y / x) for x, y in zip(a_mhz, b_mhz, strict=True)) / len(a_mhz))
    return s, level, math.hypot(sigma, fit), math.hypot(noise, fit)


def _judged(a: Sequence[float], b: Sequence[float], strata: Sequence[int], widen: float) -> tuple[float, float, float]:
    """(change, standard error, the noise the rule takes): the replicas' mean and its error from the spread
    within them and the placement variance between them; the rule widens the first by ``widen``."""
    mean, se = stratified_log_ratio(a, b, strata)
    place = placement_variance(a, b, strata)
    return math.expm1(mean), math.sqrt(se**2 + place), math.sqrt((se * widen) ** 2 + place)


def _in_cycles(a_s: Sequence[float], b_s: Sequence[float], a_mhz: Sequence[float],
               b_mhz: Sequence[float], sensitivity: float = 1.0) -> tuple[list[float], list[float]]:
    """Block times x block clocks ** ``sensitivity`` (1: cycles; 0: time)."""
    return ([t * m**sensitivity for t, m in zip(a_s, a_mhz, strict=True)],
            [t * m**sensitivity for t, m in zip(b_s, b_mhz, strict=True)])


def few_pairs_factor(pairs: int) -> float:
    """How much wider the rule's noise is taken than the standard error, for an error estimated from few
    pairs: Student's t over the normal at the rule's Z (4 pairs: x3.1, 8: x1.5, 30: x1.1). With the normal's Z,
    an A/A called cases stopped after 4-6 pairs FASTER or SLOWER (docs/gpu-validation.md#the-paired-ab)."""
    return t_widening(Z, pairs)


@dataclass(frozen=True)
class AbResult:
    """One case of an A/B run: the paired verdict, each arm's median over all its samples, every pair's
    blocks, and what the SM clock did in each arm (derived from the blocks' clocks)."""

    name: str  # the test
    case_id: str
    group: str
    backend: str
    paired: Paired
    a_median_s: float
    b_median_s: float
    stop: str = ""  # precision, time-cap, noise-cap or pair-cap (engine.pairing.PairRule)
    timer: str = ""
    block_samples: int = 0  # samples in the last block
    elapsed_s: float = 0.0
    throttle: tuple[str, str] = ("", "")  # each arm's throttle summary, where it was throttled
    plans: tuple[str, str] = ("", "")  # a slowed arm: the work injected after each call
    blocks: tuple[tuple[float, ...], tuple[float, ...]] = ((), ())  # each arm's block medians (s), pair by pair
    block_mhz: tuple[tuple[float | None, ...], tuple[float | None, ...]] = ((), ())  # their SM clocks
    replicas: tuple[int, ...] = ()  # which replica of each arm took each pair (engine.pairing); () for one
    prepare_s: float = 0.0  # every replica setting the case up, before the first pair
    records_s: float = 0.0  # the arms' records after the last pair
    places: int = 1  # each replica's set-ups: more than one where the verdict was undecided (engine.pairing)
    replace_s: float = 0.0  # setting the case up at new places, within elapsed_s
    no_room: str = ""  # why a replica could not set it up at a new place (engine.ab.pairing.PairRun.no_room)
    worker: str = ""  # the pytest-xdist worker that measured it ("" in a run of one process)
    gpu: str = ""  # the GPU that worker was pinned to (its UUID)
    arm_gpus: dict[str, str] = dataclasses.field(default_factory=dict)  # each replica's GPU, as its process saw it

    @property
    def replica_changes(self) -> dict[int, float]:
        """Each replica's own change B/A - 1, on the verdict's basis (at equal clock where measured), all pairs
        kept."""
        if len(set(self.replicas)) < 2:
            return {}
        return stratum_means(*self.judged_blocks(), self.replicas)

    def judged_blocks(self) -> tuple[tuple[float, ...], tuple[float, ...]]:
        """Every pair's blocks on the verdict's basis: at equal clock (time x clock ** the case's clock
        sensitivity) where the clocks were measured, else time; all pairs kept."""
        a_s, b_s = self.blocks
        if self.clocks_measured:
            ma, mb = _clocks(self.block_mhz[0], len(a_s)), _clocks(self.block_mhz[1], len(b_s))
            if ma and mb:
                s = 1.0 if self.paired.clock_sensitivity is None else self.paired.clock_sensitivity
                a_s, b_s = (tuple(x) for x in _in_cycles(a_s, b_s, ma, mb, s))
        return a_s, b_s

    @property
    def clocks_measured(self) -> bool:
        """``block_mhz`` are each block's mean clock from the GPU's counters (judged at equal clock), else NVML's."""
        return self.paired.basis != "time"

    @property
    def a_mhz(self) -> float | None:
        """A's SM clock: the median of its blocks' clocks (None where none was read)."""
        return _median_clock(self.block_mhz[0])

    @property
    def b_mhz(self) -> float | None:
        return _median_clock(self.block_mhz[1])

    @property
    def cycles_change(self) -> float | None:
        """The paired change in clock cycles (each block's time x its clock), where every block has its clock."""
        return cycles_change(*self.blocks, *self.block_mhz, self.replicas)

    @property
    def clock_change(self) -> float | None:
        return self.b_mhz / self.a_mhz - 1 if self.a_mhz and self.b_mhz else None

    def notes(self) -> list[str]:
        out = []
        clock = self.clock_change
        if clock is not None and abs(clock) >= CLOCK_NOTE and self.cycles_change is not None:
            out.append(f"B ran at a {abs(clock):.1%} {'lower' if clock < 0 else 'higher'} SM clock than A in the same"
                       " seconds: its power draw (its code, or where its data sit in memory: an H200 A/A saw up to"
                       f" 3 %); in cycles B/A is {self.cycles_change:+.1%}, in time {self.paired.in_time_change:+.1%}")
        if self.paired.basis != "time" and self.paired.in_time != self.paired.verdict:
            out.append(f"judged at equal SM clock{self._sensitivity_words()}; in time alone {self.paired.in_time}")
        if self.paired.basis == "time" and self.paired.in_time == "SAME" and self.paired.verdict == "AMBIGUOUS":
            out.append("SAME in time but slower in cycles, at a higher clock in B: a faster clock can hide a slower"
                       " kernel (B's extra work may draw less power, and a power cap then lets the clock up); lock"
                       " the clocks, or rerun")
        if self.stop in ("time-cap", "noise-cap", "pair-cap") and self.paired.verdict == "AMBIGUOUS":
            out.append(f"stopped at the {self.stop} after {self.paired.pairs} pairs; measure longer"
                       " (--attn-max-time) or lock the clocks")
        halves = self.replica_changes
        if halves and max(halves.values()) - min(halves.values()) >= REPLICA_NOTE:
            said = ", ".join(f"{_REPLICA_WORDS.get(k, f'replica {k + 1}')} {v:+.2%}" for k, v in halves.items()) \
                if self.places == 1 else f"{min(halves.values()):+.2%} to {max(halves.values()):+.2%} over" \
                f" {len(halves)} replica set-ups"
            out.append(f"the arms' replicas disagree ({said}): where a process's data sit (which started and"
                       " allocated first) moves this case; the verdict is on their mean, where that cancels")
        if self.places > 1:
            out.append(f"set up {self.places} times in every replica (data at new places, {self.replace_s:.1f} s):"
                       " precise enough to stop, the pairs did not settle the verdict at first; judged at the"
                       f" {self.stop}")
        if self.no_room:
            out.append(f"no more new places: {self.no_room}; the pairs went on where the replicas were")
        dropped, total = self.paired.dropped, self.paired.pairs + self.paired.dropped
        if dropped and unsteady(total, dropped):
            out.append(f"{dropped} of {total} pairs left out, their ratio over twice or under half the others' median:"
                       " more than stalls explain, so the machine's speed moved under the arms (on a CPU: other"
                       " processes, or the arms' own threads on too few cores) and what is left cannot be judged:"
                       " AMBIGUOUS; rerun on a quiet machine (a GPU's pairs left none out in every stored run)")
        elif dropped:
            out.append(f"{dropped} pair(s) left out: their ratio was over twice or under half the others'"
                       " median (a block the machine stalled)")
        out += [f"arm {arm} throttled: {t}" for arm, t in zip("AB", self.throttle, strict=True) if t]
        return out

    def _sensitivity_words(self) -> str:
        s = self.paired.clock_sensitivity
        if s is None:
            return " (time x each block's mean SM clock: cycles)"
        return (f" (time x each block's mean SM clock ** {s:.2f}, how far this case's time followed the clock"
                " over its pairs: 1 for a kernel bound by the SM clock, 0 for one bound by memory)")

    def to_json(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        lo, hi = self.paired.interval()
        data.update(interval=[lo, hi], a_mhz=self.a_mhz, b_mhz=self.b_mhz, cycles_change=self.cycles_change,
                    clocks_measured=self.clocks_measured,
                    replica_changes={str(k): v for k, v in self.replica_changes.items()})
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> AbResult:
        fields = {k: v for k, v in data.items() if k not in DERIVED}
        fields["paired"] = Paired(**fields["paired"])
        fields["throttle"] = tuple(fields.get("throttle", ("", "")))
        fields["plans"] = tuple(fields.get("plans", ("", "")))
        for key in ("blocks", "block_mhz"):
            fields[key] = tuple(tuple(arm) for arm in fields.get(key, ((), ())))
        fields["replicas"] = tuple(fields.get("replicas", ()))
        return cls(**fields)


#: What ab.json carries beside the fields, derived from them (for its readers; read back, it is derived again).
DERIVED = ("interval", "a_mhz", "b_mhz", "cycles_change", "clocks_measured", "replica_changes")
_REPLICA_WORDS = {0: "A1/B1 (A started and prepared first)", 1: "A2/B2 (B first)"}


def _median_clock(mhz: Sequence[float | None]) -> float | None:
    known = [m for m in mhz if m]
    return median(known) if known else None


def cycles_change(a_s: Sequence[float], b_s: Sequence[float], a_mhz: Sequence[float | None],
                  b_mhz: Sequence[float | None], replicas: Sequence[int] = ()) -> float | None:
    """The paired change in cycles (each block's time x its SM clock), where every block has its clock."""
    ma, mb = _clocks(a_mhz, len(a_s)), _clocks(b_mhz, len(b_s))
    return math.expm1(stratified_log_ratio(*_in_cycles(a_s, b_s, ma, mb), replicas)[0]) if ma and mb else None


def _clocks(mhz: Sequence[float | None], blocks: int) -> list[float] | None:
    """Every block's clock, or None where one is missing."""
    known = [float(m) for m in mhz if m]
    return known if blocks and len(known) == blocks else None
