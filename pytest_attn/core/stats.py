"""Order statistics of timing samples. Pure.

Precision is the half-width of a distribution-free 95 % confidence interval for the median (order
statistics, no normality assumed: GPU times are skewed and have outliers), relative to the median.
"""

from __future__ import annotations

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
