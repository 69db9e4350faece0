"""Order statistics of timing samples. Pure.

Precision is the half-width of a distribution-free 95 % confidence interval for the median (order
statistics, no normality assumed: GPU times are skewed and have outliers), relative to the median.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Sequence

Z95 = 1.959963984540054


def median(values: Sequence[float]) -> float:
    if not values:
        raise ValueError("median of no values")
    xs = sorted(values)
    n = len(xs)
    mid = n // 2
    return xs[mid] if n % 2 else (xs[mid - 1] + xs[mid]) / 2


def median_ci(values: Sequence[float], z: float = Z95) -> tuple[float, float]:
    """Order-statistic confidence interval of the median: ranks n/2 -+ z*sqrt(n)/2."""
    xs = sorted(values)
    n = len(xs)
    if n == 0:
        raise ValueError("confidence interval of no values")
    half = z * math.sqrt(n) / 2
    lo = max(0, math.floor(n / 2 - half))
    hi = min(n - 1, math.ceil(n / 2 + half) - 1)
    return xs[lo], xs[max(lo, hi)]


def relative_precision(values: Sequence[float]) -> float:
    """Half-width of the median's 95 % CI over the median; inf with fewer than 5 samples."""
    if len(values) < 5:
        return math.inf
    lo, hi = median_ci(values)
    m = median(values)
    return (hi - lo) / 2 / m if m > 0 else math.inf


def relative_drift(values: Sequence[float | None]) -> float | None:
    """How much ``values`` moved over the run: the least-squares line through them (by position), from
    its first point to its last, over their median. None with fewer than 5 known values. A GPU whose
    clock fell while a case was sampled shows a negative clock drift and a positive time drift."""
    points = [(i, v) for i, v in enumerate(values) if v is not None]
    if len(points) < 5:
        return None
    n = len(points)
    mean_x = sum(x for x, _ in points) / n
    mean_y = sum(y for _, y in points) / n
    sxx = sum((x - mean_x) ** 2 for x, _ in points)
    if sxx == 0:
        return None
    slope = sum((x - mean_x) * (y - mean_y) for x, y in points) / sxx
    mid = median([y for _, y in points])
    return slope * (points[-1][0] - points[0][0]) / mid if mid > 0 else None


OUTLIER_FACTOR = 2.0  # a repeat this many times off the others' median (either way) is an outlier


def times_off(value: float, reference: float) -> float:
    """How many times ``value`` is off ``reference``, either way (2.0: twice or half); both positive."""
    return max(value / reference, reference / value)


def without_outliers(values: Sequence[float]) -> tuple[list[float], list[float]]:
    """(kept, dropped): with three values or more, those more than :data:`OUTLIER_FACTOR` times off the
    median of all are dropped -- one odd run (a busy machine, a throttled GPU) must not set a case's
    noise; with fewer, all are kept (two values cannot say which one is odd)."""
    if len(values) < 3:
        return list(values), []
    mid = median(values)
    if mid <= 0:
        return list(values), []
    kept = [v for v in values if v > 0 and times_off(v, mid) <= OUTLIER_FACTOR]
    return kept, [v for v in values if v not in kept]


def relative_spread(values: Sequence[float]) -> float | None:
    """Sample standard deviation over the mean (None with fewer than 2 values): the spread of a case's
    medians over independent repeats."""
    if len(values) < 2:
        return None
    mean = sum(values) / len(values)
    if mean <= 0:
        return None
    var = sum((v - mean) ** 2 for v in values) / (len(values) - 1)
    return math.sqrt(var) / mean


def paired_log_ratio(a: Sequence[float], b: Sequence[float]) -> tuple[float, float]:
    """(mean, standard error) of ``log(b_i / a_i)`` over pairs of positive values; the error is inf
    with one pair (one pair cannot say how much the ratio varies)."""
    if len(a) != len(b) or not a:
        raise ValueError(f"{len(a)} values of A against {len(b)} of B; pair them one to one")
    logs = [math.log(y / x) for x, y in zip(a, b, strict=True)]
    n = len(logs)
    mean = sum(logs) / n
    if n < 2:
        return mean, math.inf
    return mean, math.sqrt(sum((v - mean) ** 2 for v in logs) / (n - 1)) / math.sqrt(n)


def log_ratios_by_stratum(a: Sequence[float], b: Sequence[float], strata: Sequence[int]) -> dict[int, list[float]]:
    """Each stratum's ``log(b_i / a_i)``, in the order the pairs came; strata in the order first met."""
    groups: dict[int, list[float]] = {}
    for x, y, s in zip(a, b, strata, strict=True):
        groups.setdefault(s, []).append(math.log(y / x))
    return groups


def stratified_log_ratio(a: Sequence[float], b: Sequence[float], strata: Sequence[int]) -> tuple[float, float]:
    """(mean, standard error) of ``log(b_i / a_i)`` where pair ``i`` belongs to stratum ``strata[i]`` (a
    paired A/B's replicas: the processes of each arm that took pair ``i``): the mean of the strata's means,
    its error from the spread *within* each stratum. A difference between strata that is the same for A/A and
    A/B (which replica of an arm started and allocated first) cancels in the mean and does not count as noise.
    One stratum (or none given) is :func:`paired_log_ratio`; the error is inf where a stratum has one pair."""
    if not strata or len(set(strata)) == 1:
        return paired_log_ratio(a, b)
    if not len(a) == len(b) == len(strata):
        raise ValueError(f"{len(a)} values of A, {len(b)} of B and {len(strata)} strata; give one of each per pair")
    groups = log_ratios_by_stratum(a, b, strata)
    means = [sum(g) / len(g) for g in groups.values()]
    mean = sum(means) / len(means)
    if any(len(g) < 2 for g in groups.values()):
        return mean, math.inf
    var_of_mean = sum(sum((v - m) ** 2 for v in g) / (len(g) - 1) / len(g) for g, m in zip(groups.values(), means,
                                                                                            strict=True))
    return mean, math.sqrt(var_of_mean) / len(means)


def placement_variance(a: Sequence[float], b: Sequence[float], strata: Sequence[int]) -> float:
    """What the strata's means differ by beyond their own noise, as a variance of their mean (log ratio
    squared): ``max(0, Var(stratum means) / S - SE^2)``, with ``SE`` :func:`stratified_log_ratio`'s. Two
    replicas whose means differ by ``d``: ``max(0, d^2 / 4 - SE^2)``. A paired A/B adds it to its noise: where
    a process's data sit moves a case by a draw of its own, and two draws per arm average it only so far
    (docs/gpu-validation.md#the-paired-ab)."""
    if not strata or len(set(strata)) < 2:
        return 0.0
    groups = log_ratios_by_stratum(a, b, strata)
    means = [sum(g) / len(g) for g in groups.values()]
    centre = sum(means) / len(means)
    spread = sum((m - centre) ** 2 for m in means) / (len(means) - 1)
    se = stratified_log_ratio(a, b, strata)[1]
    return max(0.0, spread / len(means) - se**2) if math.isfinite(se) else 0.0


def clock_sensitivity(time_ratios: Sequence[float], clock_ratios: Sequence[float],
                      strata: Sequence[int] = ()) -> tuple[float, float] | None:
    """How a case's time follows the SM clock, from its own pairs: ``s`` in ``time ~ clock ** -s``, the slope of
    each pair's log time ratio B/A on its log clock ratio, within each stratum (each replica's means taken out,
    so where a process sits does not enter it), clamped to [0, 1] -- 1 for a kernel bound by the SM clock
    (cycles fixed), 0 for one bound by memory (time fixed) -- with the slope's standard error. None where the
    clock ratios do not vary within a stratum (nothing to fit: the caller keeps cycles).

    At a power cap the clock moves block by block, so the pairs' clock ratios spread and the slope is seen (a
    memory-bound decode step near 0, a compute-bound prefill near 1: docs/gpu-validation.md#the-paired-ab)."""
    if not len(time_ratios) == len(clock_ratios) or (strata and len(strata) != len(time_ratios)):
        raise ValueError(f"{len(time_ratios)} time ratios, {len(clock_ratios)} clock ratios, {len(strata)} strata")
    y = [math.log(r) for r in time_ratios]
    x = [math.log(r) for r in clock_ratios]
    groups: dict[int, list[int]] = {}
    for i, s in enumerate(strata or [0] * len(y)):
        groups.setdefault(s, []).append(i)
    sxx = sxy = 0.0
    for idx in groups.values():
        mx, my = sum(x[i] for i in idx) / len(idx), sum(y[i] for i in idx) / len(idx)
        sxx += sum((x[i] - mx) ** 2 for i in idx)
        sxy += sum((x[i] - mx) * (y[i] - my) for i in idx)
    if sxx <= 1e-12:
        return None
    slope = sxy / sxx
    resid = 0.0
    for idx in groups.values():
        e = [y[i] - slope * x[i] for i in idx]
        m = sum(e) / len(e)
        resid += sum((v - m) ** 2 for v in e)
    dof = len(y) - len(groups) - 1
    se = math.sqrt(resid / dof / sxx) if dof > 0 else math.inf
    return min(1.0, max(0.0, -slope)), se


def at_equal_clock(a: Sequence[float], b: Sequence[float], a_mhz: Sequence[float], b_mhz: Sequence[float],
                   strata: Sequence[int] = ()) -> tuple[list[float], list[float], float, float]:
    """Block times at equal SM clock: each x its clock ** ``s``, ``s`` the pairs' :func:`clock_sensitivity`
    (1, with no error, where it cannot be fitted: cycles). Returns (A's, B's, ``s``, its standard error)."""
    fitted = clock_sensitivity([y / x for x, y in zip(a, b, strict=True)],
                               [y / x for x, y in zip(a_mhz, b_mhz, strict=True)], strata)
    s, error = fitted if fitted and math.isfinite(fitted[1]) else (1.0, 0.0)
    return ([t * m**s for t, m in zip(a, a_mhz, strict=True)], [t * m**s for t, m in zip(b, b_mhz, strict=True)],
            s, error)


def stratum_means(a: Sequence[float], b: Sequence[float], strata: Sequence[int]) -> dict[int, float]:
    """Each stratum's mean ``log(b_i / a_i)``, as a relative change (``exp - 1``)."""
    groups = log_ratios_by_stratum(a, b, strata)
    return {s: math.expm1(sum(g) / len(g)) for s, g in sorted(groups.items())}


@functools.lru_cache(maxsize=256)
def t_quantile(p: float, dof: int) -> float:
    """The ``p`` quantile (0.5 < p < 1) of Student's t with ``dof`` degrees of freedom: by bisection on
    its distribution function, integrated numerically in ``u = atan(t / sqrt(dof))`` (where the density is
    ``cos(u) ** (dof - 1)``, smooth on a finite range). Pure Python; within 1e-4 of the tables."""
    if dof < 1 or not 0.5 < p < 1:
        raise ValueError(f"t quantile needs dof >= 1 and 0.5 < p < 1, not dof={dof}, p={p}")
    scale = math.exp(math.lgamma((dof + 1) / 2) - math.lgamma(dof / 2) - 0.5 * math.log(math.pi))

    def above_zero(x: float) -> float:  # P(0 < T < x), Simpson's rule
        top, steps = math.atan(x / math.sqrt(dof)), 400
        h = top / steps
        f = [math.cos(i * h) ** (dof - 1) for i in range(steps + 1)]
        return scale * h / 3 * (f[0] + f[-1] + 4 * sum(f[1:-1:2]) + 2 * sum(f[2:-1:2]))

    lo, hi = 0.0, 1.0
    while above_zero(hi) < p - 0.5:
        lo, hi = hi, hi * 2
    for _ in range(50):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if above_zero(mid) < p - 0.5 else (lo, mid)
    return (lo + hi) / 2


def t_widening(z: float, pairs: int) -> float:
    """How much wider a ``z``-standard-error rule must take the noise when the error is estimated from
    ``pairs`` values: Student's t over the normal at the same one-sided probability (4: x3.1, 8: x1.5,
    30: x1.1 at z = 3); inf below two values."""
    if pairs < 2:
        return math.inf
    return t_quantile(0.5 * (1 + math.erf(z / math.sqrt(2))), pairs - 1) / z
