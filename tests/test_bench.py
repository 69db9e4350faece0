"""The hand-over of measured samples to pytest-benchmark (pytest_attn.plugin.bench)."""

from __future__ import annotations

import pytest

from pytest_attn.plugin import bench


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
    fake = FakeBenchmark(bench.replay_clock)
    bench.feed_benchmark(fake, samples)
    assert fake.durations == pytest.approx(samples, rel=1e-9, abs=0)  # float rounding of the clock only
