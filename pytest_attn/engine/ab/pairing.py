"""A paired A/B measurement of one case: both arms prepare it (each passes the check against the reference
before anything is timed), then take turns -- never at the same time -- in blocks of samples, in the order
A B B A A B B A ..., until the pairs' ratio is known well enough or a cap is reached.

Pair ``i`` is the ``i``-th block of each arm; the two ran back to back, within a fraction of a second, so
the clock and power state they saw is the same and their ratio keeps only the arms' difference. The
alternating order (ABBA) cancels what runs first in a pair gaining or losing from it, and a clock drifting
steadily within a pair. A block of short samples starts with a call thrown away (the arm's first after the
other's, untraced). The block statistic is the median of its samples. Where every block of both arms has its
mean SM clock read on the GPU (:mod:`.clockprobe`), the pairs are judged in cycles (block time x that clock), the
stopping rule included: at a power cap the clock moves block by block and with where an arm's data sit.

**Replicas.** Each arm is two worker processes, started and given each case in the order A1 B1 B2 A2;
pairs alternate between the replicas two at a time (A1 B1, B1 A1, A2 B2, B2 A2, ...), so every replica takes
as many pairs with its arm first as second. Where a process sits decides some cases by about 1 %, with a
sign set by which arm's process started and allocated first (docs/gpu-validation.md#the-paired-ab). A1/B1 has
A first, A2/B2 has B first, so the verdict -- the mean of the replicas' mean
ratios, its noise the spread within each (:func:`~pytest_attn.core.stats.stratified_log_ratio`) -- keeps the
arms' difference and loses the places'. The second replica of an arm times the case as the first did (A1's
timer, calls per sample and input sets) and skips the reference check the first replica of its arm passed.

**New places.** Two draws of place per arm average it only so far: the verdict counts what the replicas differ
by as noise, so a case whose replicas land 1-4 % apart stays AMBIGUOUS however many pairs it takes. Where
the stopping rule would stop but the first verdict is not settled (``judge``:
:meth:`~pytest_attn.verdicts.ab.paired.Paired.settled`), every replica sets the case up again while holding its
old set-up -- its data then sit elsewhere -- in the other order than last time, and the pairs go on, each
replica of each set-up a stratum of its own (``PairRun.replicas``: replica + replicas x set-up), at a new set-up
each round, until the noise cap (and at least as long again as it took to be undecided:
:meth:`PairRule.undecided_cap`), where the case is judged once: the place is the data's, not the process's, and
places that happened to agree would decide a case judged at every round (tests/test_ab.py; measured:
docs/gpu-validation.md#the-paired-ab).

Arms are anything with ``ask(request, within_s) -> answer``
(:class:`~pytest_attn.engine.ab.processes.ArmProcess`, which kills an arm past ``within_s``:
:mod:`~pytest_attn.engine.ab.waits`; tests use fakes on a fake clock).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from ...core.stats import at_equal_clock, median, stratified_log_ratio, t_widening
from ..settings import CaseFailed, CaseSkipped
from .messages import NO_ROOM, Asks, Block, BlockAnswer, Finish, HandOver, Prepare, PrepareAnswer, Release
from .waits import DEFAULT_WAITS, ArmWaits, CaseWaits

#: Not a stop: the noise is low enough to stop, but the verdict is not settled -- go on, at new places.
UNDECIDED = "undecided"


@dataclass(frozen=True)
class PairRule:
    """When to stop taking pairs, always at an even count (as many pairs with A first as with B first):

    * ``precision``: after ``min_pairs``, once ``z`` standard errors of the mean log ratio fit in half the
      threshold (a change of the threshold is then told from none);
    * ``time-cap``: after ``min_capped_pairs``, once both arms' blocks together took ``max_time_s`` and the
      noise, widened by Student's t for the pairs taken (as the verdict widens it), is within
      ``decidable`` of the threshold -- long calls, such as HunyuanVideo's 1.5 s step, get few pairs;
    * ``noise-cap``: at ``noisy_time_s`` whatever the noise, once ``min_pairs`` are taken -- a case still too
      noisy at ``max_time_s`` (a power-capped one) goes on until then; a long step's four pairs, past it
      already, are not enough (their noise, from three degrees of freedom, is taken x3.1);
    * ``pair-cap``: at ``max_pairs``.

    A precision or time-cap stop whose verdict is not settled (``decided`` says False) is not taken: until
    :meth:`undecided_cap` :data:`UNDECIDED` says to go on at new places (see the module), from then on it is the
    noise cap.

    A block lasts about ``block_s``: one sample where one sample is longer. A kernel-sum arm traces a block's
    samples together (:meth:`~pytest_attn.engine.timers.KernelSumTimer.samples`), which halves a block's host
    time with the same medians (docs/gpu-validation.md#the-paired-ab)."""

    threshold: float = 0.02
    z: float = 3.0
    min_pairs: int = 8
    min_capped_pairs: int = 4
    max_pairs: int = 400
    max_time_s: float = 6.0
    noisy_time_s: float = 18.0
    #: the noise (``z`` widened standard errors, as a share of the threshold) the precision stop leaves at
    #: ``min_pairs`` (half the threshold x t's 1.5 at 8 pairs)
    decidable: float = 0.75
    block_s: float = 0.03
    min_block_samples: int = 3
    max_block_samples: int = 2000
    warm_below_s: float = 0.02  # a block of samples shorter than this starts with one thrown away

    def stop(self, a: list[float], b: list[float], elapsed_s: float, replicas: list[int] | None = None,
             round_pairs: int | None = None, decided: Callable[[], bool] | None = None,
             undecided_s: float | None = None) -> str | None:
        """Why to stop now, :data:`UNDECIDED`, or None; only at a whole round (each replica's pairs in both
        orders: ``round_pairs``, by default two per stratum of ``replicas``). ``undecided_s``: when the verdict
        was first found undecided (:meth:`undecided_cap`)."""
        n, strata = len(a), len(set(replicas)) if replicas else 1
        if n % (round_pairs or 2 * strata) or n < min(self.min_pairs, self.min_capped_pairs):
            return None
        if n >= self.max_pairs:
            return "pair-cap"
        _, se = stratified_log_ratio(a, b, replicas or [])
        reason = None
        if n >= self.min_pairs and self.z * se <= self.threshold / 2:
            reason = "precision"
        elif n >= self.min_capped_pairs and elapsed_s >= self.max_time_s \
                and self.z * se * t_widening(self.z, n - strata + 1) <= self.decidable * self.threshold:
            reason = "time-cap"
        if reason and decided is not None and not decided():
            cap = self.undecided_cap(elapsed_s if undecided_s is None else undecided_s)
            return UNDECIDED if elapsed_s < cap else "noise-cap"
        if reason:
            return reason
        return "noise-cap" if n >= self.min_pairs and elapsed_s >= self.noisy_time_s else None

    def undecided_cap(self, undecided_s: float) -> float:
        """How long a case whose verdict was first undecided after ``undecided_s`` goes on: to the noise cap, and
        at least as long again: a 1.5 s step has its four pairs past the noise cap of ``--attn-max-time=1``, too
        few to decide a 2 % slowdown (docs/gpu-validation.md#the-paired-ab)."""
        return max(self.noisy_time_s, 2 * undecided_s)

    def samples(self, wall_per_sample_s: float | None) -> int:
        """Samples in a block of about ``block_s`` (one, where one sample is longer)."""
        if not wall_per_sample_s or wall_per_sample_s <= 0 or not math.isfinite(wall_per_sample_s):
            return self.min_block_samples
        if wall_per_sample_s >= self.block_s:
            return 1
        return max(self.min_block_samples, min(self.max_block_samples, round(self.block_s / wall_per_sample_s)))


@dataclass
class PairRun:
    """What the pairs of one case measured: block medians (seconds per call), block SM clocks (MHz) as NVML
    read them (the median of the samples' readings) and as the GPU's counters read them (the block's mean)."""

    a_s: list[float] = field(default_factory=list)
    b_s: list[float] = field(default_factory=list)
    a_mhz: list[float | None] = field(default_factory=list)
    b_mhz: list[float | None] = field(default_factory=list)
    a_mean_mhz: list[float | None] = field(default_factory=list)
    b_mean_mhz: list[float | None] = field(default_factory=list)
    block_samples: list[int] = field(default_factory=list)
    #: which replica of each arm took each pair, and at which of its set-ups: replica + replicas x (place - 1)
    replicas: list[int] = field(default_factory=list)
    places: int = 1  # set-ups of each replica (new places where the verdict was undecided)
    replace_s: float = 0.0  # setting the case up at new places, within elapsed_s
    undecided_s: float | None = None  # when the verdict was first found undecided (PairRule.undecided_cap)
    no_room: str = ""  # why a replica could not set the case up at a new place (the pairs went on where they were)
    stop: str = ""
    elapsed_s: float = 0.0  # the pairs' blocks, from the first to the stop
    prepare_s: float = 0.0  # every replica setting the case up (before the first pair)
    records_s: float = 0.0  # the arms' records after the stop (hand-overs, kernel names, peak memory)
    prepared: tuple[PrepareAnswer, PrepareAnswer] = (PrepareAnswer(), PrepareAnswer())
    records: tuple[dict[str, Any], dict[str, Any]] = ({}, {})

    @property
    def timer(self) -> str:
        """The timer both arms used (A's choice)."""
        return self.prepared[0].timer

    @property
    def clocks_measured(self) -> bool:
        """Every block of both arms has its mean SM clock from the GPU's counters."""
        return bool(self.a_s) and all(m for m in (*self.a_mean_mhz, *self.b_mean_mhz)) \
            and len(self.a_mean_mhz) == len(self.b_mean_mhz) == len(self.a_s)

    def clocks(self) -> tuple[list[float | None], list[float | None]]:
        """The block clocks the verdict uses: the measured means where every block has one, else NVML's."""
        return (self.a_mean_mhz, self.b_mean_mhz) if self.clocks_measured else (self.a_mhz, self.b_mhz)

    def add(self, a: BlockAnswer, b: BlockAnswer, samples: int) -> None:
        """A pair: each arm's block median, its NVML clock (the median of the samples' readings) and its mean."""
        for block, times, mhz, mean in ((a, self.a_s, self.a_mhz, self.a_mean_mhz),
                                        (b, self.b_s, self.b_mhz, self.b_mean_mhz)):
            times.append(median(block.times))
            clocks = [c for c in block.clocks if c]
            mhz.append(median(clocks) if clocks else None)
            mean.append(block.mean_mhz)
        self.block_samples.append(samples)

    def judged(self) -> tuple[list[float], list[float]]:
        """What the pairs are judged on, the stopping rule included: time at equal clock (time x mean clock **
        the case's clock sensitivity, fitted on the pairs so far; 1 until the clocks vary) where the clocks were
        measured, else time -- as the verdict (:func:`~pytest_attn.verdicts.ab.paired.paired`) judges them. A
        memory-bound decode step, whose time does not follow the clock, is then not held to the clock's noise."""
        if not self.clocks_measured:
            return self.a_s, self.b_s
        ma, mb = [float(m or 0) for m in self.a_mean_mhz], [float(m or 0) for m in self.b_mean_mhz]
        a_e, b_e, _, _ = at_equal_clock(self.a_s, self.b_s, ma, mb, self.replicas)
        return a_e, b_e


Replicas = Sequence[Asks]  # one arm's worker processes (one or two)


def prepare_all(cases: tuple[dict[str, Any], dict[str, Any]], label: str, a: Replicas, b: Replicas,
                waits: CaseWaits | None = None,
                clock: Callable[[], float] = time.perf_counter) -> tuple[PrepareAnswer, PrepareAnswer]:
    """Every replica sets the case up, in the order A1 B1 B2 A2 (each replica after the first of its arm
    skips the check its first passed); all time it with the timer, calls per sample and input sets A1 chose.
    Returns A1's and B1's answers. CaseSkipped or CaseFailed (naming the arm) where one cannot; then none
    holds the case. ``waits``: how long each may take (:mod:`.waits`), told how long each took."""
    waits = waits or CaseWaits(ArmWaits())
    holding: list[Asks] = []
    first = _prepared(a[0], Prepare(cases[0], label), holding, waits, clock)
    answers = {id(a[0]): first}
    for k in range(len(a)):
        for arm, case in ((b[k], cases[1]), (a[k], cases[0])) if k % 2 else ((a[k], cases[0]), (b[k], cases[1])):
            if arm is a[0]:
                continue
            answers[id(arm)] = _prepared(arm, Prepare(case, label, first.pin(), check=arm is b[0]), holding, waits,
                                         clock)
    return first, answers[id(b[0])]


def _prepared(arm: Asks, request: Prepare, holding: list[Asks], waits: CaseWaits,
              clock: Callable[[], float]) -> PrepareAnswer:
    began = clock()
    answer = arm.ask(request, waits.setup(first=request.check))
    waits.took(clock() - began)
    if answer.ok:
        holding.append(arm)
        return answer
    for other in holding:
        other.ask(Release(), waits.after())
    if answer.skip:
        raise CaseSkipped(f"arm {arm.label}: {answer.skip}")
    raise CaseFailed(f"arm {arm.label}: {answer.fail or answer}")


def run_pair(cases: tuple[dict[str, Any], dict[str, Any]], label: str, a: Replicas, b: Replicas, rule: PairRule,
             clock: Callable[[], float] = time.perf_counter,
             judge: Callable[[PairRun], bool] | None = None, waits: ArmWaits | None = None) -> PairRun:
    """Prepare every replica, take pairs of blocks in ABBA order, replica after replica, until ``rule``
    stops, and each arm's record (its first replica's, with the other's samples). ``judge``: whether the
    pairs so far decide the verdict; where they do not at a stop, every replica sets the case up again (new
    places, :func:`replace_all`) and the pairs go on (see the module). ``waits``: the bound of each wait on an
    arm, from what the case took so far (:mod:`.waits`)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"{len(a)} replicas of A against {len(b)} of B; give each arm as many")
    bounds = CaseWaits(waits or DEFAULT_WAITS)
    started = clock()
    run = PairRun(prepared=prepare_all(cases, label, a, b, bounds, clock))
    run.prepare_s = clock() - started
    per_sample = max(p.estimate_s * p.calls_per_sample for p in run.prepared)
    samples, t0 = rule.samples(per_sample), clock()
    replace_cost = run.prepare_s  # the first set-up checked and compiled: the most a new one can cost
    while True:
        n = len(run.a_s)
        k = (n // 2) % len(a)
        order = (a[k], b[k]) if n % 2 == 0 else (b[k], a[k])
        warm = per_sample < rule.warm_below_s
        expected_s = (samples + warm) * per_sample
        blocks = {id(arm): arm.ask(Block(samples, warm), bounds.block(expected_s)) for arm in order}
        run.add(blocks[id(a[k])], blocks[id(b[k])], samples)
        run.replicas.append(k + len(a) * (run.places - 1))
        run.elapsed_s = clock() - t0
        strata = run.replicas if len(set(run.replicas)) > 1 else None
        stop = rule.stop(*run.judged(), run.elapsed_s, strata, 2 * len(a),
                         None if judge is None else (lambda: run.places == 1 and judge(run)), run.undecided_s)
        if stop == UNDECIDED:
            run.undecided_s = run.elapsed_s if run.undecided_s is None else run.undecided_s
            if run.elapsed_s + replace_cost < rule.undecided_cap(run.undecided_s):
                began = clock()
                run.no_room = replace_all(cases, label, a, b, run.prepared[0], first_b=run.places % 2 == 1,
                                          waits=bounds, clock=clock)
                took = clock() - began
                run.replace_s += took
                replace_cost = math.inf if run.no_room else took  # no room: no more new places
                run.places += 1
        elif stop:
            run.stop = stop
            break
        per_sample = max(blocks[id(x)].wall_s / samples for x in order)
        samples = rule.samples(per_sample)
    ended = clock()
    run.records = (_finish(a, run.stop, False, bounds), _finish(b, run.stop, True, bounds))
    run.records_s = clock() - ended
    return run


def replace_all(cases: tuple[dict[str, Any], dict[str, Any]], label: str, a: Replicas, b: Replicas,
                first: PrepareAnswer, first_b: bool, waits: CaseWaits | None = None,
                clock: Callable[[], float] = time.perf_counter) -> str:
    """Every replica sets the case up again, unchecked, timed as before, holding its old set-up meanwhile (its
    new data sit elsewhere): A1 B1 B2 A2, or B1 A1 A2 B2 where ``first_b``. Where one has no room for a new
    set-up beside its old one, it keeps the old one and the rest go on: returns why (else ""); each pair of
    replicas is a new stratum all the same, as some of it moved. CaseFailed (naming the arm) where one cannot
    set it up otherwise; then none holds the case."""
    no_room, waits = "", waits or CaseWaits(ArmWaits())
    for k in range(len(a)):
        pair = ((a[k], cases[0]), (b[k], cases[1]))
        for arm, case in pair[::-1] if (k % 2 == 1) != first_b else pair:
            began = clock()
            answer = arm.ask(Prepare(case, label, first.pin(), check=False, replace=True), waits.setup(first=False))
            waits.took(clock() - began)
            if answer.skip and answer.skip.startswith(NO_ROOM):
                no_room = no_room or f"arm {arm.label}: {answer.skip}"
                continue
            if not answer.ok:
                for other in (*a, *b):
                    other.ask(Release(), waits.after())
                raise CaseFailed(f"arm {arm.label}, setting the case up at a new place: "
                                 f"{answer.fail or answer.skip or answer}")
    return no_room


def _finish(replicas: Replicas, stop: str, diagnose: bool, waits: CaseWaits) -> dict[str, Any]:
    """The arm's record: its first replica's, over the samples of every replica (the others hand theirs over
    and release the case). Kernel names and peak memory are B's figures; A's would cost two more profiled calls."""
    more = [arm.ask(HandOver(), waits.after()) for arm in replicas[1:]]
    return dict(replicas[0].ask(Finish(stop, diagnose, more), waits.after()).record)


def check_pair(cases: tuple[dict[str, Any], dict[str, Any]], label: str, a: Replicas, b: Replicas,
               waits: ArmWaits | None = None) -> None:
    """``--benchmark-disable``: the first replica of each arm sets the case up and checks it; nothing is timed."""
    bounds = CaseWaits(waits or DEFAULT_WAITS)
    prepare_all(cases, label, a[:1], b[:1], bounds)
    a[0].ask(Release(), bounds.after())
    b[0].ask(Release(), bounds.after())
