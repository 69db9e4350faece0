"""Timers, the choice between them and the sizes they use (pytest_attn.engine.timers), with fakes."""

from __future__ import annotations

import math

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
    # an A/B arm takes kernel-sum throughout: a 6.4 ms fwd+bwd step is its kernels' time, not the host's
    assert choose_timer("auto", True, 6.4e-3) == "cuda-event"
    assert choose_timer("auto", True, 6.4e-3, events_from_s=math.inf) == "kernel-sum"
    assert choose_timer("auto", True, 0.27, events_from_s=0.1) == "cuda-event"
    assert choose_timer("cuda-event", True, 6.4e-3, events_from_s=math.inf) == "cuda-event"  # asked for: as asked


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
    # an A/B arm's floor: several places in memory, even where one set is past 3x the L2
    assert input_sets(2 << 30, l2, min_sets=4) == 4
    assert input_sets(64 << 20, l2, min_sets=4) == 4
    assert input_sets(8 << 20, l2, min_sets=4) == 23
    assert input_sets(8 << 20, None, min_sets=4) == 4


def test_cpu_timer_cycles_input_sets(fake_clock):
    seen = []
    steps = [lambda i=i: (seen.append(i), fake_clock.advance(0.25)) for i in range(3)]
    timer = timers.CpuTimer(steps, clock=fake_clock)
    assert [timer.sample() for _ in range(4)] == [0.25] * 4
    assert seen == [0, 1, 2, 0]


class GraphInner:
    """A CUDA-graph timer of four calls a replay whose replays read ``replay_s``; counts its samples."""

    kind = "cuda-graph"
    calls_per_sample = 4

    def __init__(self, replay_s):
        self.n, self.replay_s = 0, replay_s

    def sample(self):
        self.n += 1
        return self.replay_s


def test_kernel_sum_excludes_the_flush_and_divides_by_calls(monkeypatch):
    activities = iter([
        [("FillFunctor<signed char>", 20e-6)],  # profiling the flush alone: learn its name
        [("FillFunctor<signed char>", 20e-6), ("flash_fwd_kernel", 10e-6), ("combine", 2e-6)] * 4,
    ])
    monkeypatch.setattr(timers, "device_activity", lambda run: (run(), next(activities))[1])
    inner = GraphInner(30e-6)
    timer = timers.KernelSumTimer(inner, flush=lambda: None)
    assert timer.sample() == pytest.approx(12e-6)  # (10 + 2) us per call, flush left out
    assert timer.replay_s == [30e-6]  # the plain replay, kept for the launch-gap figure
    assert inner.n == 2  # one plain sample, one traced


def test_a_block_of_graph_samples_is_traced_once_and_cut_into_samples(monkeypatch):
    """An A/B block traces its samples together (about half the host time of one trace per sample, on an
    H100); each sample is the same run of kernels, the flush between them left out -- the figures are those
    one trace per sample gives. Where the trace cannot be cut into equal runs of
    the same kernels, the samples are traced one by one."""
    flush = ("FillFunctor<signed char>", 20e-6)
    replay = [("flash_fwd_kernel", 10e-6), ("Memset (Device)", 1e-6), ("combine", 2e-6)] * 4
    traces = [[flush]]  # profiling the flush alone: learn its name

    def traced(run):
        run()
        return traces.pop(0)

    monkeypatch.setattr(timers, "device_activity", traced)
    timer = timers.KernelSumTimer(GraphInner(50e-6), flush=lambda: None)
    traces.append([flush, *replay, flush, *replay[:-1], ("combine", 6e-6), flush, *replay])
    assert timer.samples(3) == pytest.approx([13e-6, 14e-6, 13e-6])  # per call: (10 + 1 + 2) us, B's 4 us more
    assert timer.inner.n == 6 and timer.replay_s == [50e-6] * 3  # three untraced replays, three traced
    one_by_one = [("flash_fwd_kernel", 40e-6)]
    traces += [[flush, *replay, flush, *replay[:5]], one_by_one, one_by_one]  # a sample lost kernels: not cut,
    assert timer.samples(2) == pytest.approx([10e-6, 10e-6])  # traced one by one
    traces.append(one_by_one)
    assert timer.samples(1) == pytest.approx([10e-6]) and not traces


def test_traced_samples_are_cut_where_every_run_has_the_same_kernels():
    from pytest_attn.engine.profiler import split_samples

    a, b, f = ("a", 1.0), ("b", 2.0), ("flush", 5.0)
    assert split_samples([f, a, b, f, a, b], {"flush"}, 2) == [3.0, 3.0]
    assert split_samples([a, b, a, b, a, b], set(), 3) == [3.0, 3.0, 3.0]
    assert split_samples([a, b, a], set(), 2) is None  # does not divide
    assert split_samples([a, b, b, a], set(), 2) is None  # the runs' kernels differ
    assert split_samples([f], {"flush"}, 1) is None and split_samples([a], set(), 0) is None


def test_a_long_call_s_kernels_are_read_over_events_once_a_sample(monkeypatch):
    """kernel-sum for a call of 5 ms or more (an A/B arm's, or asked for): no graph of repeated long calls,
    one traced event sample per sample and no untraced one; its cache condition is the events' (cold L2)."""
    class Events:
        kind = "cuda-event"
        calls_per_sample = 1

        def __init__(self, steps, flush):
            self.steps, self.n = steps, 0

        def sample(self):
            self.n += 1
            return 0.25

    def no_graph(*args):
        raise AssertionError("a long call is not captured")

    activities = iter([[("FillFunctor<signed char>", 20e-6)],
                       [("FillFunctor<signed char>", 20e-6), ("flash_fwd_kernel", 0.2321)]])
    monkeypatch.setattr(timers, "device_activity", lambda run: (run(), next(activities))[1])
    monkeypatch.setattr(timers, "CudaEventTimer", Events)
    monkeypatch.setattr(timers, "CudaGraphTimer", no_graph)
    built = timers.build_timer("kernel-sum", [lambda: None], 0.232, lambda: None,
                               lambda have: pytest.fail("no extra input sets for events"))
    assert (built.kind, built.input_sets, built.cache_kind) == ("kernel-sum", 1, "cuda-event")
    assert built.timer.sample() == pytest.approx(0.2321)
    assert built.timer.inner.n == 1 and built.timer.replay_s == []


def test_rotation_wraps_over_every_input_set():
    from pytest_attn.engine.timers import rotation_order

    assert rotation_order(8, 4) == [0, 1, 2, 3, 0, 1, 2, 3]
    with pytest.raises(ValueError, match="do not use every set equally"):
        rotation_order(6, 4)


def test_the_l2_condition_is_said_in_words():
    from pytest_attn.engine.timers import l2_condition

    l2 = 60 << 20
    assert l2_condition("cuda-event", 1, 10 << 20, l2) == "cold L2: a buffer of twice the L2 zeroed before each call"
    assert l2_condition("kernel-sum", 8, 10_000_000, l2) == ("cold L2 at each replay; 8 input sets of 10.0 MB rotated,"
                                                            " 70 MB between two uses of one set (L2 63 MB)")
    assert l2_condition("cuda-graph", 1, 10_000_000, l2).endswith(": warm between calls")
    assert not l2_condition("cuda-graph", 1, 500_000_000, l2).endswith("warm between calls")
    assert l2_condition("cpu", 1, 1, None) == "host caches as they are (CPU)"


class FakeGraph:
    """A captured graph as check_capture sees it: replays re-run the captured work on CPU tensors."""

    calls_per_sample = 4

    def __init__(self, torch, drop_kernel=False):
        self.torch, self.drop = torch, drop_kernel
        self.first_output = torch.zeros(4)

    def replay(self):
        if not self.drop:
            self.first_output.copy_(self.torch.arange(4.0))


def _capture_fakes(monkeypatch, torch, replay_names):
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    activity = iter([[("attn_fwd_kernel", 1e-5), ("Memset (Device)", 1e-6)], [(n, 1e-5) for n in replay_names]])
    monkeypatch.setattr(timers, "device_activity", lambda run: (run(), next(activity))[1])


def test_capture_check_passes_a_faithful_graph(monkeypatch):
    torch = pytest.importorskip("torch")
    _capture_fakes(monkeypatch, torch, ["attn_fwd_kernel"] * 4)
    graph = FakeGraph(torch)
    found = timers.check_capture(lambda: torch.arange(4.0), graph)
    assert found.startswith("a replay ran the eager call's 1 kernel(s) x 4 calls; the replay rewrote the output")


def test_capture_check_fails_a_graph_missing_a_kernel(monkeypatch):
    torch = pytest.importorskip("torch")
    _capture_fakes(monkeypatch, torch, ["combine_kernel"] * 4)
    with pytest.raises(timers.CaptureError, match=r"eager attn_fwd_kernel x1; replayed combine_kernel x1"):
        timers.check_capture(lambda: torch.arange(4.0), FakeGraph(torch))


def test_capture_check_fails_a_graph_whose_output_goes_stale(monkeypatch):
    """The kernels look right (the profiler saw them) but the replay does not write the output: the
    poisoned output stays NaN."""
    torch = pytest.importorskip("torch")
    _capture_fakes(monkeypatch, torch, ["attn_fwd_kernel"] * 4)
    with pytest.raises(timers.CaptureError, match="output 0 differs from the eager call's after a replay"):
        timers.check_capture(lambda: torch.arange(4.0), FakeGraph(torch, drop_kernel=True))


def test_a_pin_builds_the_baseline_s_timer_whatever_the_estimate(monkeypatch):
    """A gated case is timed as its baseline record was: kernel-sum x1 is read over events even for a call the
    estimate puts under 5 ms, and kernel-sum x8 over 2 input sets is a graph of 8 calls over 2 sets even where
    the estimate says 6 ms (a noisy warm-up once read a 200 us cuDNN step at 5 ms or more)."""
    from pytest_attn.core.record import TimerPin

    made = []

    class Events:
        kind, calls_per_sample = "cuda-event", 1

        def __init__(self, steps, flush):
            made.append(("events", len(steps)))

        def sample(self):
            return 1e-3

    class Graph:
        kind = "cuda-graph"

        def __init__(self, steps, calls, flush):
            self.calls_per_sample, self.first_output = calls, None
            made.append(("graph", len(steps), calls))

        def sample(self):
            return 1e-3

    monkeypatch.setattr(timers, "CudaEventTimer", Events)
    monkeypatch.setattr(timers, "CudaGraphTimer", Graph)
    monkeypatch.setattr(timers, "check_capture", lambda step, graph: "checked")
    monkeypatch.setattr(timers, "device_activity", lambda run: [])
    built = timers.build_timer("kernel-sum", [lambda: None], 200e-6, lambda: None,
                               lambda have: pytest.fail("no input sets for events"), TimerPin("kernel-sum", 1, 1))
    assert (built.kind, built.timer.calls_per_sample, made[-1]) == ("kernel-sum", 1, ("events", 1))
    built = timers.build_timer("kernel-sum", [lambda: None], 6e-3, lambda: None, lambda have: [lambda: None],
                               TimerPin("kernel-sum", 8, 2))
    assert (built.kind, built.input_sets, built.timer.calls_per_sample, made[-1]) == ("kernel-sum", 2, 8,
                                                                                      ("graph", 2, 8))
    built = timers.build_timer("kernel-sum", [lambda: None], 6e-3, lambda: None, lambda have: [lambda: None] * 9,
                               TimerPin("kernel-sum", 8, 2))  # memory gave other sets: the pin cannot hold
    assert built.timer.calls_per_sample == 10 and built.input_sets == 10  # the record says so; the gate, TIMER


def test_a_call_the_warm_up_reads_long_is_timed_by_its_kernels_when_the_host_made_it_long(monkeypatch):
    """The timer follows the GPU's work, not one noisy reading of the host's: a warm-up whose events read 5.3 ms
    for a call whose kernels take 0.2 ms (a cuDNN fwd+bwd step on an H100, in the full committed run) chooses
    kernel-sum and says why; a call whose kernels do take 6.4 ms stays on events; a short reading is not
    profiled at all."""
    from factories import H200

    from pytest_attn.engine import measure
    from pytest_attn.engine.sampling import WarmupReport

    kernels = {"s": 0.2e-3}
    profiled = []
    monkeypatch.setattr(measure, "device_activity", lambda step: profiled.append(1) or [("k", kernels["s"])])
    slow_host = WarmupReport([0.09, 5.2e-3, 5.3e-3, 5.4e-3], 0.1, True, collections=1)
    estimate, why, by_kernels = measure.call_estimate(slow_host, lambda: None, H200, timers.GRAPH_THRESHOLD_S)
    assert estimate == 0.2e-3 and by_kernels and choose_timer("auto", True, estimate) == "kernel-sum"
    assert "5.3 ms a call by events" in why and "kernels 0.2 ms: the host's launches" in why
    assert "1 garbage collection" in why and "first call 90.00 ms" in why
    kernels["s"] = 6.4e-3
    estimate, why, by_kernels = measure.call_estimate(slow_host, lambda: None, H200, timers.GRAPH_THRESHOLD_S)
    assert estimate == 5.3e-3 and not by_kernels and choose_timer("auto", True, estimate) == "cuda-event"
    assert "kernels 6.4 ms" in why
    profiled.clear()
    short = WarmupReport([0.09, 0.6e-3, 0.6e-3, 0.6e-3], 0.1, True)
    assert measure.call_estimate(short, lambda: None, H200, timers.GRAPH_THRESHOLD_S) == (0.6e-3, "", False)
    assert not profiled


def test_a_long_call_with_the_host_in_its_events_figure_is_timed_by_its_kernels(monkeypatch):
    """FA4's varlen fwd+bwd on an H100: events 7.04 ms, kernels 6.64 ms (the GPU idle 6 % of the call while the
    host launched it), and 7.54 ms in a baseline recorded on another host -- its events figure moved with the host.
    Over :data:`HOST_GAP` apart, the kernels time it; within, events stay (a long call's launch gaps are small)."""
    from factories import H200

    from pytest_attn.engine import measure
    from pytest_attn.engine.sampling import WarmupReport

    kernels = {"s": 6.64e-3}
    monkeypatch.setattr(measure, "device_activity", lambda step: [("k", kernels["s"])])
    warm = WarmupReport([0.09, 7.0e-3, 7.04e-3, 7.1e-3], 0.1, True)
    estimate, why, by_kernels = measure.call_estimate(warm, lambda: None, H200, timers.GRAPH_THRESHOLD_S)
    assert by_kernels and estimate == 6.64e-3 and "the GPU idles 6% of the call while the host launches" in why
    assert warm.host_gap == pytest.approx(1 - 6.64 / 7.04)  # into the record: the gate counts it for events
    kernels["s"] = 6.9e-3  # 2 % under the events reading: HunyuanVideo's and skewed varlen's 1.5-2.7 % on an H200
    estimate, why, by_kernels = measure.call_estimate(warm, lambda: None, H200, timers.GRAPH_THRESHOLD_S)
    assert by_kernels and estimate == 6.9e-3 and "the GPU idles 2% of the call" in why
    kernels["s"] = 6.99e-3  # 0.7 % under it: events stay
    estimate, why, by_kernels = measure.call_estimate(warm, lambda: None, H200, timers.GRAPH_THRESHOLD_S)
    assert not by_kernels and estimate == 7.04e-3


def test_a_call_that_leaves_work_on_an_unjoined_stream_is_not_timed_while_other_capture_failures_fall_back(
        monkeypatch):
    """CUDA refuses to end a capture whose call forked work onto a stream it never joins (seen on an H100 with a
    back end computing on a side stream: 'capturing stream has unjoined work'): that work is outside what events
    or a graph read, so the case fails naming it; a library that cannot be captured for another reason is timed
    with events, as before, and the note says why."""

    class Events:
        kind, calls_per_sample = "cuda-event", 1

        def __init__(self, steps, flush):
            pass

    def graph_failing(message):
        class Graph:
            def __init__(self, steps, calls, flush):
                raise RuntimeError(message)
        return Graph

    monkeypatch.setattr(timers, "CudaEventTimer", Events)
    monkeypatch.setattr(timers, "device_activity", lambda run: [])
    monkeypatch.setitem(__import__("sys").modules, "torch", type("T", (), {"cuda": type("C", (), {
        "synchronize": staticmethod(lambda: None)})}))
    monkeypatch.setattr(timers, "CudaGraphTimer", graph_failing("CUDA error: capturing stream has unjoined work"))
    with pytest.raises(timers.CaptureError, match="another stream that its own stream does not wait for"):
        timers.build_timer("cuda-graph", [lambda: None], 1e-3, lambda: None, lambda have: [])
    monkeypatch.setattr(timers, "CudaGraphTimer", graph_failing("operation not permitted when stream is capturing"))
    built = timers.build_timer("cuda-graph", [lambda: None], 1e-3, lambda: None, lambda have: [])
    assert built.kind == "cuda-event" and "graph capture failed (RuntimeError: operation not permitted" in built.note
