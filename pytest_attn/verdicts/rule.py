"""The regression gate: the benchmarks of two runs in (:mod:`.runs`), a verdict per benchmark out. Pure.

Verdicts: SLOWER, FASTER, SAME, AMBIGUOUS, CLOCK (slower in time, not in clock cycles), TIMER (the two
medians were taken by different timers or calls per sample: not compared), NEW (not in the baseline), MISSING
(in the baseline and selected by this run, not measured: skipped, failed; fails the run by default) and
UNSELECTED (in the baseline, not selected by this run: another test file, ``-k``, another back end). This module
says MISSING for every case only in the baseline; :mod:`.selection` tells the two apart.

**Like with like.** A median is a figure of its timer: one pair of CUDA events around a 200 us cuDNN fwd+bwd
step reads the host's autograd launches (506 us on an H100), the sum of its kernels reads 199 us. A gated run
measures each case with the timer and calls per sample its baseline record names (the plugin pins them), so
TIMER is left for a run that asked for another timer (``--attn-timer``) or fell back (a graph that cannot be
captured, no CUPTI): it says what differs and what to do, and fails the run by default
(``--attn-fail-on=slower,timer``): a gate that could not compare a case must not pass it.

**The rule.** A case's median in one run has two kinds of noise (both relative, as standard deviations):

* within the run, from its own samples: the median's 95 % confidence half-width / 1.96;
* between runs (the clock, the GPU's temperature, memory placement): the spread of the case's medians
  over independent runs (``--attn-add-to-baseline`` adds one to a stored baseline) where it has them --
  at least the median spread over all cases (a spread of three is itself noisy) and :data:`FLOOR` -- else
  an assumed :data:`ASSUMED_RUN_NOISE`. On a CPU the largest spread of any case stands for every case
  (:class:`Noise`, ``worst``): on a shared CI machine a jump between runs can hit any case. A repeat more
  than twice or under half the median of a case's three or more is left out of its spread
  (:func:`repeat_spread`): one odd run must not blind the gate.

A side's noise is ``between / sqrt(K)`` (K repeats averaged; a baseline over several GPUs: the mean of its GPUs'
medians) or, for one run, the larger of ``between`` and ``within``: each repeat's median carries its own samples'
noise already. The change's noise is ``sigma = sqrt(base^2 + current^2 + gpus^2)``, ``gpus`` the spread between
this run's GPU and the baseline's (:mod:`.fleet`: measured from a baseline's repeats on several GPUs, else an
allowance measured on real hosts). A run on a GPU that measured two repeats or more is compared with them alone
where that is sharper (``base = between / sqrt(k)``, no ``gpus`` term; :meth:`Noise.reference`) -- and
with the threshold ``t`` (default 5 %) and ``Z`` = 3:

* SLOWER when the change is at least ``max(Z * sigma, t / 2)``: beyond what noise does, and at least
  half the threshold (a paired A/B, :mod:`.ab.paired`, 5/8 of it) -- FASTER the mirror image;
* SAME when the change is under ``t / 2`` and ``|change| + Z * sigma < t``: a change of ``t`` is ruled out;
* AMBIGUOUS otherwise: the evidence overlaps (too noisy to tell a change of ``t`` from none).

**False alarms and power.** With the noise known, an unchanged case is called SLOWER only when it
moved beyond both ``3 sigma`` and ``t / 2``: at most 0.13 % of the time; a rough noise estimate costs a few
AMBIGUOUS, never a SAME (simulated in tests/test_gate.py; measured: docs/gpu-validation.md#the-stored-baseline-gate).

**Clocks.** Where both runs recorded their SM clock, the verdict is checked in cycles (time x clock), by
the same rule (a stored baseline pairs each repeat's time with its own clock), in :mod:`.cycles`: a SLOWER
(FASTER) that is not SLOWER there is CLOCK -- the GPU ran at a lower clock, not slower code -- unless a
compute-bound case ran at the power cap and its cycles do not rule the slowdown out (a kernel drawing more power
lowers the clock itself); a SAME is AMBIGUOUS when the clock rose by :data:`.cycles.CLOCK_STEP` or more and the
cycles are slower and not SAME (a faster clock hid a 5 % slowdown on four cases of an H200 run:
docs/gpu-validation.md#the-stored-baseline-gate). A case that stopped at its time cap before its
precision target keeps its verdict and says so.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from ..core.percent import parse_percent
from ..core.stats import OUTLIER_FACTOR, Z95, median, times_off
from .cycles import consult_cycles
from .fleet import FleetNoise, Reference, gpu_factor, own_repeats, spread
from .runs import Bench
from .verdict import DEFAULT_FAIL_ON, ORDER, Verdict

VERDICTS = ORDER  # (the vocabulary: .verdict)
DEFAULT_THRESHOLD = 0.05
Z = 3.0
ASSUMED_RUN_NOISE = 0.01  # between-run noise of one GPU run's median when the baseline measured none
ASSUMED_CPU_RUN_NOISE = 0.05  # the same on a CPU (shared machines, frequency scaling)
FLOOR = 0.0025  # between-run noise is never taken as less than this
OWN_LEAST = 2  # repeats of a run's own GPU that may stand alone as its reference: one odd run must not decide


def parse_fraction(text: str, what: str = "threshold") -> float:
    """``5%`` or ``0.05`` -> 0.05; more than 0, less than 1000 %."""
    return parse_percent(text, what, upper=10.0)


def parse_override(text: str) -> tuple[str, str, float]:
    """``backend:flex=10%`` or ``group:NAME=3%`` -> (kind, name, fraction)."""
    m = re.fullmatch(r"\s*(backend|group):([^=]+)=(.+)", text)
    if not m:
        raise ValueError(f"threshold override {text!r} must look like backend:NAME=10% or group:NAME=3%")
    return m[1], m[2].strip(), parse_fraction(m[3])


@dataclass(frozen=True)
class Thresholds:
    default: float = DEFAULT_THRESHOLD
    by_backend: Mapping[str, float] = field(default_factory=dict)
    by_group: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def build(cls, default: float, overrides: Iterable[tuple[str, str, float]]) -> Thresholds:
        backend: dict[str, float] = {}
        group: dict[str, float] = {}
        for kind, name, value in overrides:
            (backend if kind == "backend" else group)[name] = value
        return cls(default, backend, group)

    def for_bench(self, bench: Bench) -> float:
        if bench.group in self.by_group:
            return self.by_group[bench.group]
        return self.by_backend.get(bench.backend, self.default)

    def unknown(self, backends: Iterable[str]) -> list[str]:
        """Back-end overrides that name none of ``backends``: a mistyped override never applies."""
        known = set(backends)
        return [f"backend:{name}" for name in self.by_backend if name not in known]


@dataclass(frozen=True)
class Noise:
    """The between-run noise the rule assumes: measured (from repeats) or assumed. On a GPU a case's
    noise is its own (the power-capped cases move most), pooled by the median spread; on a CPU a jump
    between runs can hit any case, so the largest spread of any case is every case's (``worst``). And the
    between-GPU spread (:class:`.fleet.FleetNoise`): none on a CPU."""

    pooled: float | None  # the median (worst: the largest) spread over the baseline's cases with repeats
    assumed: float = ASSUMED_RUN_NOISE
    worst: bool = False
    fleet: FleetNoise | None = None  # None: no between-GPU noise (a CPU, or two runs compared without a baseline)

    @classmethod
    def of(cls, base: Mapping[str, Bench], cur: Mapping[str, Bench], cpu: bool = False) -> Noise:
        """The noise of two runs on a GPU, or with ``cpu`` on a CPU (its assumed noise, the worst case)."""
        # the baseline's own where it has them: back-to-back reruns of one GPU (merge --reruns) agree more closely
        # than its repeats, and would lower every case's noise (H200: 0.29 % -> 0.25 %, docs/gpu-validation.md)
        stored = [s for b in base.values() if (s := repeat_spread(b)) is not None]
        spreads = stored or [s for b in cur.values() if (s := repeat_spread(b)) is not None]
        pooled = (max if cpu else median)(spreads) if spreads else None
        noise = cls(pooled, ASSUMED_CPU_RUN_NOISE if cpu else ASSUMED_RUN_NOISE, cpu)
        if cpu:
            return noise
        run = pooled if pooled is not None else noise.assumed
        fleet = FleetNoise.of(((b.backend, b.bound, spread(b.repeats_s, b.repeats_gpu)) for b in base.values()
                               if b.repeats_s), max(FLOOR, run))
        return dataclasses.replace(noise, fleet=fleet)

    def between(self, b: Bench, c: Bench) -> float:
        """The between-run noise of one run of this case."""
        own = [s for x in (b, c) if (s := repeat_spread(x)) is not None]
        if self.pooled is None and not own:
            return self.assumed
        return max([FLOOR, *own, *([self.pooled] if self.pooled is not None else [])])

    def gpu(self, b: Bench, c: Bench, between: float) -> tuple[float, float, str]:
        """(tau, the multiple of tau^2 between ``c``'s GPU and ``b``'s centre, where tau came from) for this case;
        (0, 0, "") on a CPU or between two runs without a baseline's repeats."""
        if self.fleet is None or not b.repeats_s:
            return 0.0, 0.0, ""
        s = spread(b.repeats_s, b.repeats_gpu)
        tau, source = self.fleet.tau(b.backend, b.bound, s.tau(between))
        return tau, gpu_factor(s, c.gpus), source

    def reference(self, b: Bench, c: Bench, between: float) -> Reference:
        """What ``c`` is compared with: the baseline's centre over its GPUs, or -- where the baseline holds repeats of
        ``c``'s GPU and that is sharper -- those repeats alone (its own offset then cancels). The choice follows
        the noise estimates only, never the medians."""
        tau, factor, source = self.gpu(b, c, between)
        centre = Reference(b.median_s, b.cycles, side_sigma(b, between), tau * math.sqrt(factor), source)
        one_gpu = len(c.gpus) == 1  # reruns on two GPUs (merge --reruns) are no one GPU's
        mine = own_repeats(b.repeats_s, b.repeats_gpu, c.gpu, b.repeats_clock_mhz) if self.fleet and one_gpu else None
        if mine is None or mine[0] < OWN_LEAST:
            return centre
        count, median_s, cycles = mine
        own = between / math.sqrt(count)
        if own**2 >= centre.sigma**2 + centre.gpu_sigma**2:
            return centre
        return Reference(median_s, cycles, own, 0.0, "", count)

    def describe(self) -> str:
        if self.pooled is None:
            run = (f"between-run noise assumed {self.assumed:.1%} per run (no repeats recorded: to measure it, add"
                   " two repeats to the baseline with --attn-add-to-baseline)")
        elif self.worst:
            run = (f"between-run noise measured from repeats: the largest of any case, {self.pooled:.2%} per run,"
                   " taken for every case (on a CPU a jump between runs can hit any case)")
        else:
            run = f"between-run noise measured from repeats: median {self.pooled:.2%} per run (floor {FLOOR:.2%})"
        return run if self.fleet is None else f"{run}; {self.fleet.describe()}"


def repeat_spread(bench: Bench) -> float | None:
    """The spread of a case's repeats around their own GPU's median (pooled within GPUs, :func:`.fleet.spread`), an
    outlier repeat left out: one odd run of three must not make every case AMBIGUOUS (on a CPU the largest spread is
    every case's). Two repeats too far apart to say which is odd have no spread to give (:func:`odd_pair`)."""
    if odd_pair(bench) or len(bench.repeats_s) < 2:
        return None
    return spread(bench.repeats_s, bench.repeats_gpu).run


def odd_pair(bench: Bench) -> str:
    """Why a case's two stored repeats cannot be trusted (more than :data:`OUTLIER_FACTOR` apart: which one is
    odd cannot be told), or ""."""
    reps = bench.repeats_s
    if len(reps) != 2 or min(reps) <= 0 or times_off(reps[0], reps[1]) <= OUTLIER_FACTOR:
        return ""
    return (f"its two stored repeats are {times_off(reps[0], reps[1]):.0f}x apart ({reps[0] * 1e3:.4g} and"
            f" {reps[1] * 1e3:.4g} ms): which one is odd cannot be told, so neither is its baseline; add a third"
            " repeat (--attn-add-to-baseline), which leaves the odd one out")


def side_sigma(bench: Bench, between: float) -> float:
    """Relative noise of one run's median: ``between`` -- measured from repeats' medians, so it holds their samples'
    noise already -- or its own samples' CI where that is wider (a time cap); a baseline over repeats: the variance of
    the mean of its GPUs' medians (:meth:`.fleet.Spread.center_variance`). Adding the two counted the samples' noise
    twice: clean reruns on unseen GPUs read 0.4-0.6 of the noise the gate assumed (docs/gpu-validation.md)."""
    within = bench.spread / Z95 if math.isfinite(bench.spread) else 1.0
    if len(bench.repeats_s) < 2:
        return max(within, between)
    return math.sqrt(spread(bench.repeats_s, bench.repeats_gpu).center_variance(between))


def verdict(change: float, sigma: float, threshold: float, least: float = 0.5) -> Verdict:
    """SLOWER, FASTER, SAME or AMBIGUOUS for a relative ``change`` with noise ``sigma`` (see the module);
    ``least``: the smallest change called SLOWER or FASTER, as a fraction of the threshold."""
    limit = max(Z * sigma, threshold * least)
    if change >= limit:
        return Verdict.SLOWER
    if change <= -limit:
        return Verdict.FASTER
    if abs(change) < threshold / 2 and abs(change) + Z * sigma < threshold:
        return Verdict.SAME
    return Verdict.AMBIGUOUS


@dataclass(frozen=True)
class Comparison:
    name: str
    verdict: Verdict
    baseline: Bench | None
    current: Bench | None
    change: float | None = None  # current / baseline - 1
    threshold: float | None = None
    noise: float | None = None  # Z x sigma: the change noise alone reaches once in ~740
    cycles_change: float | None = None  # the same in clock cycles (time x SM clock), where both have clocks
    notes: tuple[str, ...] = ()
    in_time: str = ""  # the verdict of the time alone, before the clock cycles were consulted
    gpu_noise: float = 0.0  # Z x the between-GPU part of sigma (0: the same GPU, a CPU, no baseline repeats)
    gpu_source: str = ""  # where that part came from: "own" (this case's GPUs), "pooled" (its class's), "allowance"
    own_repeats: int = 0  # > 0: compared with that many repeats of this run's own GPU alone (no between-GPU part)

    @property
    def entry(self) -> Bench:
        found = self.current or self.baseline
        assert found is not None
        return found


def unlike(b: Bench, c: Bench) -> str:
    """Why the two medians cannot be compared (another timer or calls per sample), or "" when they can (or a
    run without records cannot say)."""
    pb, pc = b.pin, c.pin
    if pb is None or pc is None or (pb.timer, pb.calls_per_sample) == (pc.timer, pc.calls_per_sample):
        return ""
    how = c.record.timing.timer_choice if c.record is not None else ""
    fell = c.record.timing.timer_note if c.record is not None else ""
    why = "; ".join(filter(None, [how, fell]))
    # a run measured without this baseline chose its own timers: shards run with --attn-baseline=off and merged
    # gave 11 TIMER on a 2 x H200 host (docs/several-gpus.md)
    unpinned = c.record is not None and c.record.timing.chose_its_timer
    way = (" This run chose its own timer: it was not measured against this baseline (run with --attn-baseline=off,"
           " or shards run so and merged). Run it with the baseline it is gated against (the default"
           " --attn-baseline=auto, or --attn-baseline=FILE): each case is then timed as its record says"
           if unpinned else " Run it as the baseline did (without --attn-timer: each case is then timed as its"
           " baseline record says)")
    return (f"the baseline timed it by {pb.describe()} ({pb.input_sets} input set(s)), this run by {pc.describe()}"
            f" ({pc.input_sets}){f': {why}' if why else ''}. Medians of two timers are two quantities (events"
            f" around a short call read the host's launches): not compared.{way}; or record the baseline again"
            " with this timer (--attn-save-baseline)")


def host_noise(b: Bench, c: Bench) -> float:
    """The share of an events figure the GPU sat idle while the host launched the call (``Timing.host_gap``), the
    larger of the two runs': it moves with the host (a case timed by events read 4-7 % faster on another host:
    docs/gpu-validation.md#the-stored-baseline-gate)."""
    gaps = [t.host_gap for t in (x.record.timing for x in (b, c) if x.record is not None)
            if t.timer == "cuda-event" and t.host_gap]
    return max([*gaps, unrecorded_gap(b, c)], default=0.0)


def unrecorded_gap(b: Bench, c: Bench) -> float:
    """A baseline timed by events before the gaps were recorded (no ``host_gap`` in its record): its gap, as far
    as this run's kernels tell it -- what they leave of the baseline's median. That presumes the kernels did not
    change; where they did, the change counts as noise (AMBIGUOUS, not SAME: record the baseline again). Measured:
    docs/gpu-validation.md#the-stored-baseline-gate."""
    if b.record is None or c.record is None:
        return 0.0
    tb, tc = b.record.timing, c.record.timing
    if tb.timer != "cuda-event" or tb.host_gap is not None or not tc.kernels_s or b.median_s <= 0:
        return 0.0
    return max(0.0, 1 - tc.kernels_s / b.median_s)


def _compare_one(name: str, b: Bench, c: Bench, thresholds: Thresholds, noise: Noise) -> Comparison:
    change = c.median_s / b.median_s - 1
    threshold = thresholds.for_bench(c)
    differs = unlike(b, c)
    if differs:
        return Comparison(name, Verdict.TIMER, b, c, change, threshold, notes=(differs,))
    odd = odd_pair(b)
    if odd:
        return Comparison(name, Verdict.AMBIGUOUS, b, c, change, threshold, notes=(odd,))
    between = noise.between(b, c)
    host = host_noise(b, c)
    ref = noise.reference(b, c, between)
    change, gpu_sigma = c.median_s / ref.median_s - 1, ref.gpu_sigma
    sigma = math.hypot(ref.sigma, side_sigma(c, between), gpu_sigma, host)
    in_time = verdict(change, sigma, threshold)
    result, notes = in_time, []
    if host:
        unrecorded = " (the baseline's own gap was not recorded: taken as what this run's kernels leave of its" \
            " median)" if unrecorded_gap(b, c) >= host else ""
        notes.append(f"timed by events, {host:.1%} of which the GPU sat idle while the host launched the call"
                     f"{unrecorded}: that part moves with the host's speed and load, and is counted as noise"
                     " (unpinned, such a call is timed by its kernels: record the baseline again to gate it so)")
    cycles_change = c.cycles / ref.cycles - 1 if ref.cycles and c.cycles else None
    if cycles_change is not None:
        base_mhz = ref.cycles / ref.median_s / 1e6 if ref.own_repeats and ref.cycles else b.sm_clock_mhz
        in_cycles = verdict(cycles_change, sigma, threshold)
        result, why = consult_cycles(in_time, in_cycles, change, cycles_change, base_mhz or 0.0, c, Z * sigma,
                                     threshold)
        notes += [why] if why else []
    for side, bench in (("baseline", b), ("this run", c)):
        if not bench.converged:
            notes.append(f"{side} did not converge (time cap; its median's 95% CI is +-{bench.spread:.1%})")
    return Comparison(name, result, b, c, change, threshold, Z * sigma, cycles_change, tuple(notes), in_time,
                      Z * gpu_sigma, ref.gpu_source if gpu_sigma else "", ref.own_repeats)


def compare(base: Mapping[str, Bench], cur: Mapping[str, Bench], thresholds: Thresholds,
            noise: Noise | None = None) -> list[Comparison]:
    """Verdicts for every benchmark in either run, the failing kinds first."""
    noise = noise or Noise.of(base, cur)
    out = []
    for name in sorted(set(base) | set(cur)):
        b, c = base.get(name), cur.get(name)
        if b is None:
            out.append(Comparison(name, Verdict.NEW, None, c))
        elif c is None:
            out.append(Comparison(name, Verdict.MISSING, b, None))
        else:
            out.append(_compare_one(name, b, c, thresholds, noise))
    return sorted(out, key=lambda x: (VERDICTS.index(x.verdict), x.name))


def regressions(comparisons: Iterable[Comparison], fail_on: Iterable[str] = DEFAULT_FAIL_ON) -> list[Comparison]:
    """The comparisons whose verdict fails the run."""
    failing = set(fail_on)
    return [c for c in comparisons if c.verdict in failing]


def matched(comparisons: Iterable[Comparison]) -> int:
    """How many benchmarks both runs have."""
    return sum(1 for c in comparisons if c.baseline is not None and c.current is not None)
