from __future__ import annotations

import math

import pytest

from pytest_attn.stopping import (
    StopRule,
    WarmupRule,
    choose_timer,
    graph_calls_per_replay,
    input_sets,
    median,
    median_ci,
    relative_precision,
    stop_reason,
    warmup_settled,
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


def test_stop_on_precision_only_with_enough_samples():
    rule = StopRule(target_precision=0.01, min_samples=10, max_time_s=100)
    tight = [1.0, 1.001, 0.999] * 4
    assert stop_reason(tight[:9], 0.1, rule) is None  # precise but too few
    assert stop_reason(tight[:10], 0.1, rule) == "precision"
    noisy = [1.0, 1.5, 0.5, 1.2, 0.8] * 4
    assert stop_reason(noisy, 0.1, rule) is None


def test_stop_on_time_cap_and_sample_cap():
    rule = StopRule(target_precision=0.001, min_samples=10, max_samples=20, max_time_s=1.0)
    noisy = [1.0, 1.5, 0.5, 1.2, 0.8]
    assert stop_reason(noisy[:4], 2.0, rule) is None  # over time but fewer than 5 samples
    assert stop_reason(noisy, 2.0, rule) == "time-cap"
    assert stop_reason(noisy * 4, 0.5, rule) == "sample-cap"


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        (dict(target_precision=0), "target_precision=0"),
        (dict(min_samples=3), "min_samples=3"),
        (dict(min_samples=10, max_samples=5), "max_samples=5 is smaller than min_samples=10"),
        (dict(max_time_s=0), "max_time_s=0"),
    ],
)
def test_stop_rule_validation(kwargs, message):
    with pytest.raises(ValueError, match=message):
        StopRule(**kwargs)


def test_warmup_settles_when_recent_times_agree():
    rule = WarmupRule(min_calls=3, min_time_s=0.0, window=3, settle_tolerance=0.05)
    compiling = [30e-3, 2e-3, 1.5e-3, 1.2e-3, 1e-3, 1e-3]  # milliseconds: short calls, windows of 3
    assert not warmup_settled(compiling, 1.0, rule)  # 1.0 vs 1.5: still falling
    assert warmup_settled([*compiling, 1e-3, 1.01e-3, 1e-3], 1.0, rule)
    assert not warmup_settled([1.0] * 6, 0.001, WarmupRule(min_time_s=0.05))  # too soon


def test_long_calls_settle_after_fewer_calls():
    rule = WarmupRule(min_calls=3, min_time_s=0.0)
    assert warmup_settled([9.0, 1.30, 1.31], 11.6, rule)  # 1.3 s calls: last two agree
    assert not warmup_settled([9.0, 1.6, 1.31], 11.9, rule)
    assert not warmup_settled([9.0, 0.05, 0.05], 9.1, rule)  # short calls need two full windows


def test_timer_choice():
    assert choose_timer("auto", on_cuda=True, call_estimate_s=20e-6) == "kernel-sum"
    assert choose_timer("auto", on_cuda=True, call_estimate_s=0.2) == "cuda-event"
    assert choose_timer("auto", on_cuda=False, call_estimate_s=20e-6) == "cpu"
    assert choose_timer("cuda-graph", on_cuda=True, call_estimate_s=0.2) == "cuda-graph"
    assert choose_timer("cuda-event", on_cuda=False, call_estimate_s=0.2) == "cpu"
    with pytest.raises(ValueError, match="timer='wall'"):
        choose_timer("wall", True, 1.0)


def test_graph_calls_and_input_sets():
    assert graph_calls_per_replay(20e-6) == 100  # capped
    assert graph_calls_per_replay(1e-3) == 2
    assert graph_calls_per_replay(10e-3) == 1
    assert graph_calls_per_replay(20e-6, sets=23) == 115  # whole passes over the input copies
    assert graph_calls_per_replay(1e-3, sets=3) == 3
    assert graph_calls_per_replay(90e-6, sets=23) == 23
    # kernel-sum: a fixed count, whatever the estimate
    assert graph_calls_per_replay(20e-6, sets=23, kernel_sum=True) == 23
    assert graph_calls_per_replay(90e-6, sets=23, kernel_sum=True) == 23
    assert graph_calls_per_replay(3e-3, sets=2, kernel_sum=True) == 8
    assert graph_calls_per_replay(5e-6, sets=1, kernel_sum=True) == 8
    l2 = 60 << 20
    assert input_sets(8 << 20, l2) == 23  # 3 x 60 MiB / 8 MiB
    assert input_sets(64 << 20, l2) == 3
    assert input_sets(2 << 30, l2) == 1
    assert input_sets(1024, l2) == 32  # capped
    assert input_sets(8 << 20, None) == 1
