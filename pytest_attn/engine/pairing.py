"""A paired A/B measurement of one case: both arms prepare it (each passes the check against the reference
before anything is timed), then take turns -- never at the same time -- in blocks of samples, in the order
A B B A A B B A ..., until the pairs' ratio is known well enough or a cap is reached.

Pair ``i`` is the ``i``-th block of each arm; the two ran back to back, within a fraction of a second, so
the clock and power state they saw is the same and their ratio keeps only the arms' difference. The
alternating order (ABBA) cancels what runs first in a pair gaining or losing from it, and a clock drifting
steadily within a pair. A block of short samples starts with one thrown away (the arm's first after the
other's). The block statistic is the median of its samples. Where every block of both arms has its mean SM
clock read on the GPU (:mod:`.clockprobe`), the pairs are judged in cycles (block time x that clock), the
stopping rule included: at a power cap the clock moves block by block and with where an arm's data sit.

Arms are anything with ``ask(request) -> answer`` (:class:`~pytest_attn.engine.arms.ArmProcess`; tests
use fakes on a fake clock).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

from ..core.stats import median, paired_log_ratio, t_widening
from .settings import CaseFailed, CaseSkipped


class Asks(Protocol):
    label: str

    def ask(self, request: dict[str, Any]) -> dict[str, Any]: ...


@dataclass(frozen=True)
class PairRule:
    """When to stop taking pairs, always at an even count (as many pairs with A first as with B first):

    * ``precision``: after ``min_pairs``, once ``z`` standard errors of the mean log ratio fit in half the
      threshold (a change of the threshold is then told from none);
    * ``time-cap``: after ``min_capped_pairs``, once both arms' blocks together took ``max_time_s`` and the
      noise, widened by Student's t for the pairs taken (as the verdict widens it), is within
      ``decidable`` of the threshold -- long calls, such as HunyuanVideo's 1.5 s step, get few pairs;
    * ``noise-cap``: at ``noisy_time_s`` whatever the noise -- a case still too noisy at ``max_time_s``
      (power-capped ones on an H200: a pair's ratio varied by 2-3 %) goes on until then;
    * ``pair-cap``: at ``max_pairs``.

    A block lasts about ``block_s``: one sample where one sample is longer."""

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
    block_s: float = 0.05
    min_block_samples: int = 3
    max_block_samples: int = 2000
    warm_below_s: float = 0.02  # a block of samples shorter than this starts with one thrown away

    def stop(self, a: list[float], b: list[float], elapsed_s: float) -> str | None:
        n = len(a)
        if n % 2 or n < min(self.min_pairs, self.min_capped_pairs):
            return None
        if n >= self.max_pairs:
            return "pair-cap"
        _, se = paired_log_ratio(a, b)
        if n >= self.min_pairs and self.z * se <= self.threshold / 2:
            return "precision"
        if n < self.min_capped_pairs or elapsed_s < self.max_time_s:
            return None
        if self.z * se * t_widening(self.z, n) <= self.decidable * self.threshold:
            return "time-cap"
        return "noise-cap" if elapsed_s >= self.noisy_time_s else None

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
    stop: str = ""
    elapsed_s: float = 0.0
    prepared: tuple[dict[str, Any], dict[str, Any]] = ({}, {})
    records: tuple[dict[str, Any], dict[str, Any]] = ({}, {})

    @property
    def timer(self) -> str:
        """The timer both arms used (A's choice)."""
        return str(self.prepared[0].get("timer", ""))

    @property
    def clocks_measured(self) -> bool:
        """Every block of both arms has its mean SM clock from the GPU's counters."""
        return bool(self.a_s) and all(m for m in (*self.a_mean_mhz, *self.b_mean_mhz)) \
            and len(self.a_mean_mhz) == len(self.b_mean_mhz) == len(self.a_s)

    def clocks(self) -> tuple[list[float | None], list[float | None]]:
        """The block clocks the verdict uses: the measured means where every block has one, else NVML's."""
        return (self.a_mean_mhz, self.b_mean_mhz) if self.clocks_measured else (self.a_mhz, self.b_mhz)

    def judged(self) -> tuple[list[float], list[float]]:
        """What the pairs are judged on: cycles (time x mean clock) where the clocks were measured, else time."""
        if not self.clocks_measured:
            return self.a_s, self.b_s
        return ([t * float(m or 0) for t, m in zip(self.a_s, self.a_mean_mhz, strict=True)],
                [t * float(m or 0) for t, m in zip(self.b_s, self.b_mean_mhz, strict=True)])


def prepare_both(cases: tuple[dict[str, Any], dict[str, Any]], label: str, a: Asks,
                 b: Asks) -> tuple[dict[str, Any], dict[str, Any]]:
    """Both arms set the case up and check it; B times it with the timer and the input sets A chose.
    CaseSkipped or CaseFailed (naming the arm) where either cannot; then neither holds the case."""
    first = _prepared(a, {"op": "prepare", "case": cases[0], "label": label, "timer": None}, [])
    second = _prepared(b, {"op": "prepare", "case": cases[1], "label": label, "timer": first["timer"],
                           "input_sets": first.get("input_sets")}, [a])
    return first, second


def _prepared(arm: Asks, request: dict[str, Any], holding: list[Asks]) -> dict[str, Any]:
    answer = arm.ask(request)
    if "ok" in answer:
        return answer
    for other in holding:
        other.ask({"op": "release"})
    if "skip" in answer:
        raise CaseSkipped(f"arm {arm.label}: {answer['skip']}")
    raise CaseFailed(f"arm {arm.label}: {answer.get('fail', answer)}")


def run_pair(cases: tuple[dict[str, Any], dict[str, Any]], label: str, a: Asks, b: Asks, rule: PairRule,
             clock: Callable[[], float] = time.perf_counter) -> PairRun:
    """Prepare both arms, take pairs of blocks in ABBA order until ``rule`` stops, and each arm's record."""
    run = PairRun(prepared=prepare_both(cases, label, a, b))
    per_sample = max(p["estimate_s"] * p["calls_per_sample"] for p in run.prepared)
    samples, t0 = rule.samples(per_sample), clock()
    while True:
        order = (a, b) if len(run.a_s) % 2 == 0 else (b, a)
        warm = per_sample < rule.warm_below_s
        blocks = {arm.label: arm.ask({"op": "block", "samples": samples, "warm": warm}) for arm in order}
        for arm, times, mhz, mean in ((a, run.a_s, run.a_mhz, run.a_mean_mhz),
                                      (b, run.b_s, run.b_mhz, run.b_mean_mhz)):
            times.append(median(blocks[arm.label]["times"]))
            clocks = [c for c in blocks[arm.label]["clocks"] if c]
            mhz.append(median(clocks) if clocks else None)
            mean.append(blocks[arm.label].get("mean_mhz"))
        run.block_samples.append(samples)
        run.elapsed_s = clock() - t0
        stop = rule.stop(*run.judged(), run.elapsed_s)
        if stop:
            run.stop = stop
            break
        per_sample = max(blocks[x.label]["wall_s"] / samples for x in order)
        samples = rule.samples(per_sample)
    # kernel names and peak memory are B's figures; A's would cost two more profiled calls a case
    run.records = (a.ask({"op": "finish", "stop": run.stop, "diagnose": False})["record"],
                   b.ask({"op": "finish", "stop": run.stop})["record"])
    return run


def check_pair(cases: tuple[dict[str, Any], dict[str, Any]], label: str, a: Asks, b: Asks) -> None:
    """``--benchmark-disable``: both arms set the case up and check it; nothing is timed."""
    prepare_both(cases, label, a, b)
    a.ask({"op": "release"})
    b.ask({"op": "release"})
