"""The measuring loops (pytest_attn.engine.sampling), with fake timers and clocks."""

from __future__ import annotations

import pytest

from pytest_attn.engine.sampling import sample_until, warm_up
from pytest_attn.engine.stopping import StopRule, WarmupRule


def test_sample_until_stops_at_precision(fake_timer, fake_clock):
    timer = fake_timer([1e-3, 1.001e-3, 0.999e-3], fake_clock)
    clocks = iter([1980, 1965, 1980] * 10)
    result = sample_until(timer, StopRule(min_samples=10, max_time_s=100), fake_clock,
                                 read_sm_clock=lambda: next(clocks))
    assert result.stop_reason == "precision"
    assert len(result.samples_s) == 10
    assert len(result.sample_clocks) == 10 and 1965 in result.sample_clocks


def test_sample_until_reads_throttle_reasons_around_each_sample(fake_timer, fake_clock):
    timer = fake_timer([1e-3], fake_clock)
    reasons = iter([0x0, 0x4, 0x0, 0x0] + [0x0] * 40)  # power cap seen after the first sample only
    clocks = iter([None] + [1980] * 20)
    result = sample_until(timer, StopRule(min_samples=10, max_time_s=100), fake_clock,
                                 read_sm_clock=lambda: next(clocks), read_reasons=lambda: next(reasons))
    assert result.sample_reasons[:2] == [0x4, 0x0] and len(result.sample_reasons) == len(result.samples_s)
    assert result.sample_clocks[0] is None and len(result.sample_clocks) == len(result.samples_s)


def test_sample_until_stops_at_time_cap_and_reports(fake_timer, fake_clock):
    timer = fake_timer([1.0, 2.0, 0.5, 1.7], fake_clock)  # noisy; each sample advances the clock
    result = sample_until(timer, StopRule(min_samples=10, max_time_s=6.0), fake_clock)
    assert result.stop_reason == "time-cap"
    assert len(result.samples_s) == 5 and result.elapsed_s == pytest.approx(6.2)
    assert result.sample_clocks == [None] * 5  # no NVML: clocks not known, nothing invented


def test_warm_up_runs_until_times_settle(fake_clock):
    times = iter([5e-3, 0.5e-3, 0.2e-3, 0.11e-3, 0.1e-3, 0.1e-3, 0.1e-3, 0.1e-3, 0.1e-3, 0.1e-3, 0.1e-3])

    def call():
        t = next(times)
        fake_clock.advance(t)
        return t

    report = warm_up(call, WarmupRule(min_calls=3, min_time_s=0.0, window=3), fake_clock)
    assert report.settled
    assert report.times_s[0] == 5e-3 and report.calls == 9
    assert report.estimate_s == pytest.approx(0.1e-3)


def test_warm_up_gives_up_at_its_cap(fake_clock):
    t = [1.0]

    def call():  # never settles: keeps halving
        t[0] /= 2
        fake_clock.advance(1.0)
        return t[0]

    report = warm_up(call, WarmupRule(max_time_s=5.0, min_time_s=0.0), fake_clock)
    assert not report.settled and report.calls == 5


def test_the_estimate_leaves_the_first_call_out_and_the_warm_up_counts_collections():
    """A first call that builds plans (here 40 ms) does not set the estimate, even in a 3-call warm-up of long
    calls; garbage collections during the warm-up are counted (they stall the host's launches)."""
    import gc

    from pytest_attn.engine.sampling import WarmupReport

    assert WarmupReport([0.04, 0.2e-3, 0.21e-3], 0.05, True).estimate_s == pytest.approx(0.205e-3)
    assert WarmupReport([0.3], 0.3, False).estimate_s == 0.3  # one call: it is all there is
    calls = iter([0.04] + [1e-3] * 20)

    def call():
        gc.collect(0)  # the youngest generation: a collection all the same, not a 0.2 s walk of this whole process
        return next(calls)

    clock = iter(range(100))
    report = warm_up(call, WarmupRule(min_calls=3, min_time_s=0.0, window=3), clock=lambda: next(clock) * 1e-3)
    assert report.collections == report.calls >= 6 and report.estimate_s == 1e-3
    assert "first call 40.00 ms" in report.describe() and "garbage collection" in report.describe()


def test_samples_a_timer_takes_together_share_the_readings_around_them(fake_timer, fake_clock):
    """A timer that takes a block's samples together (a kernel-sum timer's one trace): NVML's reasons are read
    before and after them all, the SM clock after them, and every sample of the block carries them; a timer
    without it is sampled one by one."""
    from pytest_attn.engine.sampling import Sampling, take_samples

    class Together:
        def __init__(self):
            self.asked = []

        def samples(self, count):
            self.asked.append(count)
            return [1e-5 * (i + 1) for i in range(count)]

    reasons, clocks = iter([None, 4, 0, 0, 0, 1]), iter([1755, 1980, 1965])
    kept, timer = Sampling([], "", 0.0), Together()
    take_samples(timer, kept, 3, lambda: next(clocks), lambda: next(reasons))
    assert timer.asked == [3] and kept.samples_s == pytest.approx([1e-5, 2e-5, 3e-5])
    assert kept.sample_reasons == [4, 4, 4] and kept.sample_clocks == [1755] * 3
    one = fake_timer([2e-3], fake_clock)
    take_samples(one, kept, 2, lambda: next(clocks), lambda: next(reasons))
    assert kept.samples_s[3:] == [2e-3, 2e-3] and kept.sample_reasons[3:] == [0, 1]
    assert kept.sample_clocks[3:] == [1980, 1965]
