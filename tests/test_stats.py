"""Order statistics of samples (pytest_attn.core.stats): the median and its distribution-free CI."""

from __future__ import annotations

import math

import pytest

from pytest_attn.core.stats import (
    median,
    median_ci,
    paired_log_ratio,
    relative_precision,
    stratified_log_ratio,
    stratum_means,
)


def test_median():
    assert median([3.0, 1.0, 2.0]) == 2.0
    assert median([4.0, 1.0, 2.0, 3.0]) == 2.5
    with pytest.raises(ValueError):
        median([])


def test_median_ci_uses_order_statistics():
    xs = [float(i) for i in range(1, 101)]  # n=100: ranks 50 -+ 9.8 -> 0-based 40 .. 59
    assert median_ci(xs) == (41.0, 60.0)
    assert relative_precision(xs) == pytest.approx((60 - 41) / 2 / 50.5)


def test_precision_needs_five_samples():
    assert relative_precision([1.0, 1.0, 1.0, 1.0]) == math.inf
    assert relative_precision([1.0] * 5) == 0.0


def test_outliers_do_not_blow_up_precision():
    xs = [1.0] * 30 + [50.0]  # one huge outlier: the median's CI is unaffected
    assert relative_precision(xs) == 0.0


def test_drift_is_the_fitted_change_over_the_run():
    from pytest_attn.core.stats import relative_drift, relative_spread

    assert relative_drift([1980, 1980, 1980, 1980, 1980]) == 0.0
    falling = [1980 - 20 * i for i in range(10)]  # 1980 -> 1800 MHz
    assert relative_drift(falling) == pytest.approx(-180 / 1890)
    assert relative_drift([1.0, None, 1.0, 1.0]) is None  # too few known points
    assert relative_spread([1.0]) is None and relative_spread([1.0, 1.0]) == 0.0
    assert relative_spread([0.9, 1.1]) == pytest.approx(0.1414, abs=1e-4)


def test_an_outlier_repeat_is_dropped_only_where_three_or_more_can_say_which():
    from pytest_attn.core.stats import times_off, without_outliers

    assert without_outliers([1.0, 1.02, 100.0]) == ([1.0, 1.02], [100.0])
    assert without_outliers([1.0, 1.02, 0.01]) == ([1.0, 1.02], [0.01])
    assert without_outliers([1.0, 1.3, 1.9]) == ([1.0, 1.3, 1.9], [])  # 1.9 / 1.3 = 1.46: noise, kept
    assert without_outliers([1.0, 100.0]) == ([1.0, 100.0], [])  # two cannot say which one is odd
    assert times_off(2.0, 1.0) == times_off(0.5, 1.0) == 2.0


def test_stratified_log_ratio_keeps_a_difference_between_strata_out_of_the_noise():
    """Two replicas whose places move B/A by +2 % and -2 %: the mean is ~0 either way, but only the spread
    within each replica is noise (by hand: logs 0.00995, 0.02956 | -0.01005, -0.03046)."""
    a, b, strata = [1.0] * 4, [1.01, 1.03, 0.99, 0.97], [0, 0, 1, 1]
    logs = [math.log(x) for x in b]
    mean, se = stratified_log_ratio(a, b, strata)
    assert mean == pytest.approx(((logs[0] + logs[1]) / 2 + (logs[2] + logs[3]) / 2) / 2)
    within = ((logs[1] - logs[0]) ** 2 / 2 / 2 + (logs[3] - logs[2]) ** 2 / 2 / 2) ** 0.5 / 2
    assert se == pytest.approx(within) and se == pytest.approx(0.00707, abs=2e-5)
    assert paired_log_ratio(a, b)[1] == pytest.approx(0.0129, abs=1e-4)  # unstratified: the places count as noise
    assert stratified_log_ratio(a, b, [0] * 4) == paired_log_ratio(a, b)  # one stratum: the plain pairs
    assert stratified_log_ratio(a, b, [0, 0, 0, 1])[1] == math.inf  # a stratum of one pair
    means = stratum_means(a, b, strata)
    assert means[0] == pytest.approx(math.expm1((logs[0] + logs[1]) / 2)) and means[1] < 0
