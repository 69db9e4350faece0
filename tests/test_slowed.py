"""The deliberate slowdown that proves the gate (pytest_attn.engine.slowed): its calibration maths, that
it is calibrated on the whole timed step, and that on a CPU it really adds the work it planned."""

from __future__ import annotations

import time

import pytest

torch = pytest.importorskip("torch")

from pytest_attn.backends import builtin_registry  # noqa: E402
from pytest_attn.core.case import AttnCase  # noqa: E402
from pytest_attn.engine import slowed  # noqa: E402
from pytest_attn.engine.inputs import make_inputs  # noqa: E402
from pytest_attn.engine.slowed import MatmulWork, WorkPlan, calibrate, plan_work  # noqa: E402


def test_plan_picks_the_largest_product_that_fits_four_times_and_rounds_the_count():
    units = {4096: 2e-3, 2048: 250e-6, 1024: 32e-6, 512: 5e-6}
    plan = plan_work(1e-3, units)  # 2048 fits 4 x 250 us in 1 ms
    assert (plan.size, plan.repeats, plan.planned_s) == (2048, 4, pytest.approx(1e-3))
    plan = plan_work(300e-6, units)  # 2048 no longer fits four times: 1024, 300 / 32 = 9.4 -> 9
    assert (plan.size, plan.repeats) == (1024, 9) and plan.planned_s == pytest.approx(288e-6)
    plan = plan_work(1e-6, units)  # even the smallest is longer than the target: one of it
    assert (plan.size, plan.repeats, plan.planned_s) == (512, 1, 5e-6)
    assert plan.describe(10e-6) \
        == "1 x a 512^2 matmul after each call: 5.0 us planned for 1.0 us asked (+50.0% of the 10.0 us step)"
    with pytest.raises(ValueError, match="nothing to plan"):
        plan_work(0.0, units)


def test_rounding_costs_at_most_an_eighth_of_the_target():
    for target in (37e-6, 0.8e-3, 5.3e-3, 61e-3):
        units = {2 ** k: 1e-7 * 8 ** (k - 5) for k in range(5, 13)}  # each size ~8x the next smaller
        plan = plan_work(target, units)
        if plan.repeats >= 4:
            assert abs(plan.planned_s - target) <= target / 8


class FakeWork:
    """Products whose times are known, a step whose time is known."""

    def __init__(self, step_s):
        self.step_s, self.asked = step_s, []

    def unit_seconds(self, size):
        self.asked.append(size)
        return 1e-9 * size**2  # 64^2 -> 4 us, 1024^2 -> 1 ms

    def step_seconds(self, step):
        step()
        return self.step_s

    def runner(self, plan):
        return lambda: None


def test_calibration_stops_at_the_first_size_too_long_to_fit():
    work = FakeWork(step_s=10e-3)
    plan = calibrate(work, work.step_s, 0.05)  # 500 us of work: 256^2 = 65 us x 8; 512^2 = 262 us > 500 / 4
    assert work.asked == [32, 64, 128, 256, 512] and (plan.size, plan.repeats) == (256, 8)


@pytest.mark.parametrize("direction", ["fwd", "fwd+bwd"])
def test_the_whole_timed_step_is_what_the_fraction_is_of(monkeypatch, direction):
    # a first H200 run calibrated the wait on the forward alone: fwd+bwd cases slowed by 1-2 %, not 6 %
    ran = []

    class Recording(FakeWork):
        def step_seconds(self, step):
            ran.append(step())
            return 1e-3

    monkeypatch.setattr(slowed, "WORK_FACTORY", lambda device: Recording(1e-3))
    case = AttnCase.dense(backend="sdpa-math", shape="t", batch=1, seqlen_q=4, heads_q=2, head_dim=8, dtype="fp32",
                          direction=direction)
    inner = builtin_registry().get("sdpa-math")
    inputs = make_inputs(case, inner.layout, torch.device("cpu"), requires_grad=direction == "fwd+bwd", seed=0)
    backend = slowed.SlowedBackend(inner, 0.06)
    backend.prepare(case, inputs)
    if direction == "fwd":
        assert isinstance(ran[0], torch.Tensor)  # the forward's output
    else:
        assert [g.shape for g in ran[0]] == [inputs.q.shape, inputs.k.shape, inputs.v.shape]  # dq, dk, dv
    assert "slowed on purpose: " in backend.expression(case)


def test_on_a_cpu_the_planned_work_really_takes_its_time(monkeypatch):
    """Real matmuls on this CPU: the planned work takes about what the plan says -- real work of the right order,
    not a spin on the clock. Timed in this process's CPU time, which other processes on a shared machine do not
    stretch (its wall time does: 4.4x the plan on a loaded 2-core CI machine)."""
    monkeypatch.setattr(slowed.timers, "CPU_CLOCK", time.process_time)
    work = MatmulWork(torch.device("cpu"))
    plan = calibrate(work, 20e-3, 0.5)  # 10 ms of extra work
    took = work.step_seconds(work.runner(plan))
    assert 0.4 * plan.planned_s <= took <= 3 * plan.planned_s, (plan, took)
    assert plan.planned_s == pytest.approx(10e-3, rel=0.5)


def test_a_plan_is_made_once_per_case_for_every_input_set(monkeypatch):
    made = []

    def factory(device):
        made.append(device)
        return FakeWork(1e-3)

    monkeypatch.setattr(slowed, "calibrate", lambda work, step_s, f: made.append("plan") or WorkPlan(64, 1, 1, 1))
    monkeypatch.setattr(slowed, "WORK_FACTORY", factory)
    case = AttnCase.dense(backend="sdpa-math", shape="t", batch=1, seqlen_q=4, heads_q=2, head_dim=8, dtype="fp32")
    inner = builtin_registry().get("sdpa-math")
    backend = slowed.SlowedBackend(inner, 0.06)
    for seed in range(3):
        backend.prepare(case, make_inputs(case, inner.layout, torch.device("cpu"), seed=seed))
    assert made.count("plan") == 1


def test_on_a_gpu_the_step_and_the_products_are_timed_in_device_time(monkeypatch):
    """The kernel-sum timer reads kernels' device time; events around a short product read its launch
    overhead (13.5 us for ~2 us of kernel on an H200), which made the injection add far less than asked."""
    from pytest_attn.engine import profiler

    calls = []

    def activity(run):  # CUPTI's records of the calls run() made: 2 us of kernel each
        calls.append(len(run()))
        return [("gemm", 2e-6)] * calls[-1]

    monkeypatch.setattr(profiler, "device_activity", activity)
    monkeypatch.setattr(profiler, "events_seconds", lambda fn, reps: pytest.fail("timed with events"))
    monkeypatch.setattr(torch.cuda, "synchronize", lambda: None)
    work = MatmulWork(torch.device("cpu"))
    work.cuda = True  # a GPU's path, on the CPU
    assert work.step_seconds(lambda: None) == pytest.approx(2e-6)
    assert calls == [5, 5, 5]  # three traced runs of five calls; the least per call
    assert profiler.device_seconds(lambda: None, 4, trials=2) == pytest.approx(2e-6) and calls[-2:] == [4, 4]
    now = [0.0]
    monkeypatch.setattr(slowed.timers, "CPU_CLOCK", lambda: now[0])

    def long_step():
        now[0] += 0.4  # a HunyuanVideo-long step: traced twice, once each
    calls.clear()
    assert work.step_seconds(long_step) == pytest.approx(2e-6) and calls == [1, 1]
