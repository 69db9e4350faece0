"""Order statistics of samples (pytest_attn.core.stats): the median and its distribution-free CI."""

from __future__ import annotations

import math

import pytest

from pytest_attn.core.stats import median, median_ci, relative_precision


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
