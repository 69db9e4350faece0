"""Timers, the choice between them and the sizes they use (pytest_attn.engine.timers), with fakes."""

from __future__ import annotations

import pytest

from pytest_attn.engine import timers
from pytest_attn.engine.timers import choose_timer, graph_calls_per_replay, input_sets


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


def test_cpu_timer_cycles_input_sets(fake_clock):
    seen = []
    steps = [lambda i=i: (seen.append(i), fake_clock.advance(0.25)) for i in range(3)]
    timer = timers.CpuTimer(steps, clock=fake_clock)
    assert [timer.sample() for _ in range(4)] == [0.25] * 4
    assert seen == [0, 1, 2, 0]


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
    monkeypatch.setattr(timers, "device_activity", lambda run: (run(), next(activities))[1])
    inner = Inner()
    timer = timers.KernelSumTimer(inner, flush=lambda: None)
    assert timer.sample() == pytest.approx(12e-6)  # (10 + 2) us per call, flush left out
    assert timer.replay_s == [30e-6]  # the plain replay, kept for the launch-gap figure
    assert inner.n == 2  # one plain sample, one traced
