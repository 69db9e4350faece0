"""When to stop sampling and warming up (pytest_attn.engine.stopping). Pure."""

from __future__ import annotations

import pytest

from pytest_attn.engine.stopping import StopRule, WarmupRule, stop_reason, warmup_settled


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
