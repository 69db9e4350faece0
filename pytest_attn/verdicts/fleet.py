"""How much a case's median moves from one GPU of a model to another, from a baseline's repeats. Pure.

A stored baseline keeps the median of each repeat and the GPU (UUID) that measured it. Per case, in log time, a
run's median is ``mu + g + e``: ``g`` the GPU's own offset (the same on every run of that GPU; spread ``tau`` over
the GPUs of the model), ``e`` the run's (spread ``run``, the between-run noise on one GPU). From the repeats:

* ``run``: the spread of repeats around their own GPU's median (pooled within GPUs);
* ``tau``: the spread of the GPUs' medians, less what their runs' own spread puts there
  (``var(GPU medians) - run^2 * mean(1/k)``), where the baseline holds two GPUs or more;
* the centre a run is compared with: the mean of the GPUs' medians (each GPU counts once, however many repeats).

A run on GPU ``c`` against a centre over ``G`` GPUs differs by GPU offsets whose variance is
``tau^2 * (1 + 1/G - 2/G [c among them])``: ``2 tau^2`` for a one-GPU baseline and another GPU, none for the
same GPU, ``tau^2 (1 - 1/G)`` for a GPU among several (:func:`gpu_factor`). A case's own ``tau`` from two or three
GPUs is rough, and GPUs of one or two hosts cannot rule out that another host's differ more, so the gate takes the
largest of: the case's own, the ``tau`` pooled over the baseline's cases of its class (its back end's compute- or
memory-bound cases), and :data:`ALLOWANCE`, measured across hosts (docs/gpu-validation.md, the stored-baseline
gate). A baseline with one GPU per case has only the allowance.

A run on a GPU that measured two of the repeats or more is compared with them where that is the sharper reference
(:func:`own_repeats`; :meth:`.rule.Noise.reference`): its own offset then cancels, and only the between-run noise
is left. A fleet that adds each runner's runs to its baseline gates every runner so: a 5 % slowdown read as +2.5 %
on a host that runs the case 2.5 % faster than the baseline's centre (docs/gpu-validation.md).
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from ..core.stats import median, without_outliers

#: The least tau per class: what kept clean reruns on two H200 hosts clear of SLOWER and FASTER against baselines of
#: one host and of two (docs/gpu-validation.md, the stored-baseline gate); a compute-bound case's clock-driven
#: spread is CLOCK's to explain, a latency-bound step's is not.
ALLOWANCE: Mapping[str, float] = {"compute": 0.005, "memory": 0.01, "unknown": 0.01}
TAU_FLOOR = 0.001  # a pooled tau is never taken as less than this
CLASS_LEAST = 6  # cases of a back end and bound that pool a tau of their own (else their bound's stands)
#: median(chi2_v / v) for v = 1..6: a pooled variance is the median of the cases' (their tau^2 is skewed)
CHI2_MEDIAN_OVER_DOF = (0.4549, 0.6931, 0.7887, 0.8392, 0.8703, 0.8914)


def _chi2_median_over_dof(dof: int) -> float:
    if dof <= len(CHI2_MEDIAN_OVER_DOF):
        return CHI2_MEDIAN_OVER_DOF[dof - 1]
    return (1 - 2 / (9 * dof)) ** 3  # Wilson-Hilferty


def by_gpu(values: Sequence[float], gpus: Sequence[str]) -> dict[str, list[float]]:
    """``values`` grouped by the GPU of each (all under "" where the GPUs are not known)."""
    tags = list(gpus) if len(gpus) == len(values) else [""] * len(values)
    out: dict[str, list[float]] = {}
    for value, gpu in zip(values, tags, strict=True):
        out.setdefault(gpu, []).append(value)
    return out


def center(values: Sequence[float], gpus: Sequence[str]) -> float:
    """The mean of the GPUs' medians, in log space (each GPU counts once); the median for one GPU."""
    groups = [median(v) for v in by_gpu(values, gpus).values()]
    if len(groups) == 1:
        return groups[0]
    return math.exp(sum(math.log(m) for m in groups) / len(groups))


@dataclass(frozen=True)
class Spread:
    """One case's repeats, read per GPU."""

    gpus: tuple[str, ...]  # the GPUs that measured its repeats ("" where unknown)
    repeats: tuple[int, ...]  # repeats per GPU, in the order of ``gpus``
    run: float | None  # the between-run spread on one GPU (None: no GPU has two repeats)
    tau_sq_raw: float | None  # the variance of the GPUs' log medians (None: fewer than two GPUs)

    def tau(self, run: float) -> float | None:
        """This case's own tau, given the between-run spread ``run`` (None: fewer than two GPUs)."""
        if self.tau_sq_raw is None:
            return None
        return math.sqrt(max(0.0, self.tau_sq_raw - run**2 * self.mean_inverse_repeats))

    @property
    def mean_inverse_repeats(self) -> float:
        return sum(1 / k for k in self.repeats) / len(self.repeats)

    def center_variance(self, run: float) -> float:
        """The variance a GPU-balanced centre gets from its runs: ``run^2 * sum(1/k) / G^2``."""
        return run**2 * sum(1 / k for k in self.repeats) / len(self.repeats) ** 2


def spread(values: Sequence[float], gpus: Sequence[str]) -> Spread:
    """How ``values`` (a case's repeats, seconds) spread within and between their GPUs. A repeat more than
    :data:`~pytest_attn.core.stats.OUTLIER_FACTOR` off the median of all is left out first."""
    tags = list(gpus) if len(gpus) == len(values) else [""] * len(values)
    kept, _ = without_outliers(values)
    pairs = [(v, g) for v, g in zip(values, tags, strict=True) if v in kept and v > 0]
    groups = by_gpu([v for v, _ in pairs], [g for _, g in pairs])
    # relative to each GPU's mean: with one GPU, exactly core.stats.relative_spread
    within = sum(sum((x / (sum(xs) / len(xs)) - 1) ** 2 for x in xs) for xs in groups.values())
    dof = sum(len(xs) - 1 for xs in groups.values())
    run = math.sqrt(within / dof) if dof > 0 else None
    medians = [math.log(median(vs)) for vs in groups.values()]
    tau_sq = None
    if len(medians) >= 2:
        mean = sum(medians) / len(medians)
        tau_sq = sum((m - mean) ** 2 for m in medians) / (len(medians) - 1)
    return Spread(tuple(groups), tuple(len(vs) for vs in groups.values()), run, tau_sq)


@dataclass(frozen=True)
class Reference:
    """The baseline figure a run is compared with, and its noise (relative, as standard deviations)."""

    median_s: float
    cycles: float | None  # time x SM clock where the repeats' clocks are known
    sigma: float  # of the figure itself: within and between runs
    gpu_sigma: float  # between this run's GPU and the figure's
    gpu_source: str  # where ``gpu_sigma`` came from: "own", "pooled", "allowance" ("" where none)
    own_repeats: int = 0  # > 0: the repeats of this run's own GPU, alone


def own_repeats(values: Sequence[float], gpus: Sequence[str], gpu: str | None,
                clocks: Sequence[float] = ()) -> tuple[int, float, float | None] | None:
    """The repeats ``gpu`` measured among ``values``: how many, their median, and their median of time x clock
    (MHz, where ``clocks`` has one per repeat; else None) -- or None where the GPU is unknown or measured none."""
    if not gpu or len(gpus) != len(values):
        return None
    mine = [i for i, g in enumerate(gpus) if g == gpu and values[i] > 0]
    if not mine:
        return None
    cycles = median([values[i] * clocks[i] * 1e6 for i in mine]) if len(clocks) == len(values) else None
    return len(mine), median([values[i] for i in mine]), cycles


def gpu_factor(spread_: Spread, current: str | Sequence[str | None] | None) -> float:
    """The multiple of ``tau^2`` between a run on ``current`` and the centre of the baseline's GPUs: ``1 + 1/G -
    2/G`` where that GPU is among them, ``1 + 1/G`` where it is not. A GPU not known on either side counts as the
    baseline's own where it has one GPU (as runs before GPUs were recorded were read), else as another. Runs of a
    case on ``Gc`` GPUs gated as one (``merge --reruns``) are the mean of their offsets: ``1/Gc + 1/G - 2 C/(Gc G)``,
    ``C`` the GPUs both hold (none where a GPU is not known)."""
    gpus = [current] if current is None or isinstance(current, str) else list(dict.fromkeys(current))
    count = len(spread_.gpus)
    if len(gpus) <= 1:
        one = gpus[0] if gpus else None
        known = bool(one) and all(spread_.gpus)
        among = one in spread_.gpus if known else count == 1
        return 1 + 1 / count - (2 / count if among else 0.0)
    common = len(set(gpus) & set(spread_.gpus)) if all(gpus) and all(spread_.gpus) else 0
    return 1 / len(gpus) + 1 / count - 2 * common / (len(gpus) * count)


@dataclass(frozen=True)
class FleetNoise:
    """The between-GPU spread the gate allows for: tau pooled over the baseline's cases of each class that two
    GPUs or more measured, at least :data:`ALLOWANCE`; and how many GPUs measured the baseline."""

    pooled: Mapping[str, float] = field(default_factory=dict)  # class -> tau measured over the baseline's cases
    cases: Mapping[str, int] = field(default_factory=dict)  # class -> cases that measured it
    gpus: int = 0  # distinct GPUs among the baseline's repeats
    allowance: Mapping[str, float] = field(default_factory=lambda: dict(ALLOWANCE))

    @classmethod
    def of(cls, spreads: Iterable[tuple[str, str, Spread]], run: float) -> FleetNoise:
        """Pooled from ``(back end, bound, spread)`` of the baseline's cases, ``run`` the between-run spread to take
        out: per back end and bound where :data:`CLASS_LEAST` cases or more measured it, and per bound."""
        raw: dict[str, list[float]] = {}
        gpus: set[str] = set()
        for backend, bound, s in spreads:
            gpus.update(g for g in s.gpus if g)
            if s.tau_sq_raw is not None:
                value = s.tau_sq_raw / _chi2_median_over_dof(len(s.gpus) - 1) - run**2 * s.mean_inverse_repeats
                raw.setdefault(bound, []).append(value)
                raw.setdefault(f"{backend}/{bound}", []).append(value)
        kept = {k: v for k, v in raw.items() if "/" not in k or len(v) >= CLASS_LEAST}
        pooled = {k: max(TAU_FLOOR, math.sqrt(max(0.0, median(v)))) for k, v in kept.items()}
        return cls(pooled, {k: len(v) for k, v in kept.items()}, len(gpus))

    def tau(self, backend: str, bound: str, own: float | None) -> tuple[float, str]:
        """A case's tau and where it comes from: the largest of its own, its back end's and bound's pooled one (or its
        bound's) and the allowance."""
        pooled = self.pooled.get(f"{backend}/{bound}", self.pooled.get(bound))
        allowance = self.allowance.get(bound, max(self.allowance.values()))
        if pooled is None or pooled <= allowance:
            base, source = allowance, "allowance"
        else:
            base, source = pooled, "pooled"
        if own is not None and own > base:
            return own, "own"
        return base, source

    def describe(self) -> str:
        if not self.pooled:
            parts = ", ".join(f"{k} {v:.2%}" for k, v in sorted(self.allowance.items()) if k != "unknown")
            return (f"between-GPU noise: the baseline's cases were each measured on one GPU, so the allowance"
                    f" measured on real hosts stands for it ({parts} per GPU)")
        bounds = sorted((k, v) for k, v in self.pooled.items() if "/" not in k)
        parts = ", ".join(f"{k} {v:.2%} ({self.cases[k]} cases)" for k, v in bounds)
        floor = ", ".join(f"{k} {v:.2%}" for k, v in sorted(self.allowance.items()) if k != "unknown")
        return (f"between-GPU noise measured from the baseline's {self.gpus} GPUs: {parts} per GPU, or a case's own"
                f" where larger, and at least the allowance measured across hosts ({floor})")
