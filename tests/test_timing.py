"""The measurement loops and the hand-over to pytest-benchmark, with fake timers and clocks."""

from __future__ import annotations

import pytest

from pytest_attn import timing
from pytest_attn.stopping import StopRule, WarmupRule


def test_sample_until_stops_at_precision(fake_timer, fake_clock):
    timer = fake_timer([1e-3, 1.001e-3, 0.999e-3], fake_clock)
    clocks = iter([1980, 1965, 1980] * 10)
    result = timing.sample_until(timer, StopRule(min_samples=10, max_time_s=100), fake_clock,
                                 read_sm_clock=lambda: next(clocks))
    assert result.stop_reason == "precision"
    assert len(result.samples_s) == 10
    assert len(result.sm_clocks_mhz) == 10 and 1965 in result.sm_clocks_mhz


def test_sample_until_reads_throttle_reasons_around_each_sample(fake_timer, fake_clock):
    timer = fake_timer([1e-3], fake_clock)
    reasons = iter([0x0, 0x4, 0x0, 0x0] + [0x0] * 40)  # power cap seen after the first sample only
    clocks = iter([None] + [1980] * 20)
    result = timing.sample_until(timer, StopRule(min_samples=10, max_time_s=100), fake_clock,
                                 read_sm_clock=lambda: next(clocks), read_reasons=lambda: next(reasons))
    assert result.sample_reasons[:2] == [0x4, 0x0] and len(result.sample_reasons) == len(result.samples_s)
    assert result.sample_clocks[0] is None and len(result.sample_clocks) == len(result.samples_s)
    assert len(result.sm_clocks_mhz) == len(result.samples_s) - 1


def test_sample_until_stops_at_time_cap_and_reports(fake_timer, fake_clock):
    timer = fake_timer([1.0, 2.0, 0.5, 1.7], fake_clock)  # noisy; each sample advances the clock
    result = timing.sample_until(timer, StopRule(min_samples=10, max_time_s=6.0), fake_clock)
    assert result.stop_reason == "time-cap"
    assert len(result.samples_s) == 5 and result.elapsed_s == pytest.approx(6.2)
    assert result.sm_clocks_mhz == []  # no NVML: clocks not known, nothing invented


def test_warm_up_runs_until_times_settle(fake_clock):
    times = iter([5e-3, 0.5e-3, 0.2e-3, 0.11e-3, 0.1e-3, 0.1e-3, 0.1e-3, 0.1e-3, 0.1e-3, 0.1e-3, 0.1e-3])

    def call():
        t = next(times)
        fake_clock.advance(t)
        return t

    report = timing.warm_up(call, WarmupRule(min_calls=3, min_time_s=0.0, window=3), fake_clock)
    assert report.settled
    assert report.times_s[0] == 5e-3 and report.calls == 9
    assert report.estimate_s == pytest.approx(0.1e-3)


def test_warm_up_gives_up_at_its_cap(fake_clock):
    t = [1.0]

    def call():  # never settles: keeps halving
        t[0] /= 2
        fake_clock.advance(1.0)
        return t[0]

    report = timing.warm_up(call, WarmupRule(max_time_s=5.0, min_time_s=0.0), fake_clock)
    assert not report.settled and report.calls == 5


def test_cpu_timer_cycles_input_sets(fake_clock):
    seen = []
    steps = [lambda i=i: (seen.append(i), fake_clock.advance(0.25)) for i in range(3)]
    timer = timing.CpuTimer(steps, clock=fake_clock)
    assert [timer.sample() for _ in range(4)] == [0.25] * 4
    assert seen == [0, 1, 2, 0]


class FakeBenchmark:
    """Runs pedantic the way pytest-benchmark does: timer() before and after each round."""

    def __init__(self, timer):
        self.timer = timer
        self.durations = []

    def pedantic(self, target, rounds, iterations, warmup_rounds):
        assert iterations == 1 and warmup_rounds == 0
        for _ in range(rounds):
            start = self.timer()
            target()
            self.durations.append(self.timer() - start)


def test_feed_benchmark_replays_measured_samples_exactly():
    samples = [14.3e-6, 15.1e-6, 0.42, 14.4e-6]
    bench = FakeBenchmark(timing.replay_clock)
    timing.feed_benchmark(bench, samples)
    assert bench.durations == pytest.approx(samples, rel=1e-9, abs=0)  # float rounding of the clock only


def test_kernel_sum_excludes_the_flush_and_divides_by_calls(monkeypatch):
    class Inner:
        kind = "cuda-graph"
        calls_per_sample = 4

        def __init__(self):
            self.n = 0

        def sample(self):
            self.n += 1
            return 30e-6

    activities = iter([
        [("FillFunctor<signed char>", 20e-6)],  # profiling the flush alone: learn its name
        [("FillFunctor<signed char>", 20e-6), ("flash_fwd_kernel", 10e-6), ("combine", 2e-6)] * 4,
    ])
    monkeypatch.setattr(timing, "device_activity", lambda run: (run(), next(activities))[1])
    inner = Inner()
    timer = timing.KernelSumTimer(inner, flush=lambda: None)
    assert timer.sample() == pytest.approx(12e-6)  # (10 + 2) us per call, flush left out
    assert timer.replay_s == [30e-6]  # the plain replay, kept for the launch-gap figure
    assert inner.n == 2  # one plain sample, one traced
