"""What a baseline can catch on a GPU (``pytest-attn baseline power``): from a clean run's noise, the chance that a
slowdown of a given size reads SLOWER, per case; for two runs of the GPU gated as one (``merge --reruns``: the run's
own noise halved in variance); and at best -- the run's own noise taken away, as many repeats of it would -- what the
spread between the model's GPUs leaves. Pure.

Per case, with ``sigma`` the noise the gate compares a change with (:mod:`.rule`: the baseline's, this run's and
between GPUs) and ``t`` the threshold, a slowdown ``s`` reads SLOWER with chance ``P(N(s, sigma) >= max(Z sigma,
t / 2))``: the verdict in time (a power-capped case's cycles are not judged here). Summed over the committed H200
selection's clean runs on GPUs outside the baseline it expected 187-188 of 206 SLOWER at 5 %, where the runs with 5 %
injected on their hosts read 185-198 (docs/gpu-validation.md#the-stored-baseline-gate).
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from statistics import NormalDist

from .layout import printable
from .rule import Noise, Thresholds, Z, compare, side_sigma
from .runs import Bench
from .verdict import Verdict

JUDGED = (Verdict.SAME, Verdict.AMBIGUOUS, Verdict.SLOWER, Verdict.FASTER, Verdict.CLOCK)
_NORMAL = NormalDist()


@dataclass(frozen=True)
class CasePower:
    name: str
    chance: float  # that the slowdown reads SLOWER, with this run's noise
    best: float  # the same with this run's own noise taken away
    pair: float  # the same for two runs of this GPU gated as one (merge --reruns): this run's own noise / sqrt(2)
    sigma: float  # the noise of a change (relative, one standard deviation)
    gpu_share: float  # the share of sigma^2 that is the spread between GPUs


def chance_slower(slowdown: float, sigma: float, threshold: float) -> float:
    """The chance that a true ``slowdown`` reads SLOWER where a change's noise is ``sigma``."""
    limit = max(Z * sigma, threshold / 2)
    if sigma <= 0:
        return 1.0 if slowdown >= limit else 0.0
    return 1 - _NORMAL.cdf((limit - slowdown) / sigma)


def case_powers(base: Mapping[str, Bench], run: Mapping[str, Bench], thresholds: Thresholds,
                slowdown: float) -> list[CasePower]:
    """Each case both hold and the gate judges (not TIMER, not an odd pair), least likely caught first."""
    noise = Noise.of(base, run)
    out = []
    for c in compare(base, run, thresholds, noise):
        if c.verdict not in JUDGED or c.noise is None or c.threshold is None or c.baseline is None \
                or c.current is None:
            continue
        sigma = c.noise / Z
        own = side_sigma(c.current, noise.between(c.baseline, c.current))
        rest = math.sqrt(max(0.0, sigma**2 - own**2))
        share = (c.gpu_noise / c.noise) ** 2 if c.noise else 0.0
        pair = math.sqrt(rest**2 + own**2 / 2)
        out.append(CasePower(c.name, chance_slower(slowdown, sigma, c.threshold),
                             chance_slower(slowdown, rest, c.threshold), chance_slower(slowdown, pair, c.threshold),
                             sigma, share))
    return sorted(out, key=lambda p: (p.chance, p.name))


def power_lines(powers: list[CasePower], slowdown: float, where: str, shown: int = 5) -> list[str]:
    """The report: the expected count, at best, and the cases least likely caught."""
    if not powers:
        return [f"{where}: no case both hold that the gate judges (another selection, or every case TIMER)"]
    n = len(powers)
    expected, best, pair = (sum(p.chance for p in powers), sum(p.best for p in powers),
                            sum(p.pair for p in powers))
    lines = [
        f"{where}: a {slowdown:.1%} slowdown is expected to read SLOWER on {expected:.0f} of {n} cases"
        f" ({expected / n:.1%}), from each case's noise in this run",
        f"two runs of this GPU gated as one (pytest-attn merge --reruns FIRST.json AGAIN.json): {pair:.0f} of {n}"
        f" ({pair / n:.1%})",
        f"at best, with this run's own noise taken away (many repeats of it): {best:.0f} of {n} ({best / n:.1%});"
        " what is left is the baseline's noise and the spread between GPUs of the model",
    ]
    weak = [p for p in powers if p.chance < 0.5][:shown]
    if weak:
        lines.append("least likely caught: " + ", ".join(
            f"{printable(p.name)} ({p.chance:.0%}; noise +-{Z * p.sigma:.1%}, {p.gpu_share:.0%} of it between GPUs)"
            for p in weak))
    lines.append("a smaller change, on one GPU: the paired A/B (--attn-ab=ARM_A,ARM_B), which sees 2 %")
    return lines
