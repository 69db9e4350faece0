"""Paired A/B verdicts: two arms (two builds of a kernel, two back ends) measured on one GPU in alternating
blocks of samples, each block of arm B beside one of arm A in time. Pure.

A run-vs-baseline comparison fights noise *between* runs -- another day's clock, power cap, temperature --
and resolves about 5 %. Pairing takes it out: the blocks of a pair ran within the same second or two, so
whatever the clock did to one it did to the other, and only the arms' difference is left in their ratio.
Per case the verdict is the gate's rule (:func:`~pytest_attn.verdicts.gate.verdict`) applied to the
geometric mean of the pairs' ratios B/A, with the standard error of the mean log ratio as the noise: at
the A/B threshold (:data:`AB_THRESHOLD`, 2 %), SLOWER once the change is beyond both three standard errors
and 1 %. ``tests/test_paired.py`` simulates a clock whose speed drifts +-5 % over a run: paired, a 2 %
difference is SLOWER in 200 of 200 cases and an A/A never is; the same blocks compared run against run
are not (drift lands in the difference).

Not yet wired to a command: the two-worker runner (``--attn-ab``) that produces the blocks is issue 27.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from ..core.stats import Z95
from .gate import verdict

AB_THRESHOLD = 0.02


@dataclass(frozen=True)
class Paired:
    """One case's paired comparison: ``change`` = B/A - 1 (the geometric mean over pairs)."""

    name: str
    pairs: int
    change: float
    sigma: float  # the standard error of the mean log ratio (relative)
    verdict: str

    def interval(self, z: float = Z95) -> tuple[float, float]:
        """The change's 95 % confidence interval (normal on the log ratios)."""
        centre = math.log1p(self.change)
        return math.expm1(centre - z * self.sigma), math.expm1(centre + z * self.sigma)


def paired(name: str, a_s: Sequence[float], b_s: Sequence[float], threshold: float = AB_THRESHOLD) -> Paired:
    """The verdict on ``b_s`` against ``a_s``: block times (seconds) of arm A and arm B, pair by pair in
    the order they ran. Fewer than two pairs cannot say how noisy the ratio is: AMBIGUOUS unless SAME is
    impossible to miss."""
    if len(a_s) != len(b_s) or not a_s:
        raise ValueError(f"{name}: {len(a_s)} blocks of A against {len(b_s)} of B; pair them one to one")
    if any(not (x > 0 and math.isfinite(x)) for x in (*a_s, *b_s)):
        raise ValueError(f"{name}: block times must be finite and positive")
    logs = [math.log(b / a) for a, b in zip(a_s, b_s, strict=True)]
    n = len(logs)
    mean = sum(logs) / n
    sigma = (math.sqrt(sum((x - mean) ** 2 for x in logs) / (n - 1)) / math.sqrt(n)) if n > 1 else math.inf
    change = math.expm1(mean)
    return Paired(name, n, change, sigma, verdict(change, sigma, threshold))
