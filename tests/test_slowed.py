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
from pytest_attn.engine.slowed import (  # noqa: E402
    DEPTH_STEP,
    MAX_DEPTH,
    SHALLOW,
    TOLERANCE,
    MatmulWork,
    WorkPlan,
    calibrate,
    plan_work,
)


def affine(side, depth):
    """A product's time on a made-up GPU: writing its output, then its depth (105 ns per unit at side 1024)."""
    return 1e-6 + side**2 * 1e-12 + depth * side**2 * 1e-13


def test_the_depth_is_solved_from_two_points_of_an_affine_product():
    plan = plan_work(500e-6, 1024, (128, affine(1024, 128)), (1024, affine(1024, 1024)))
    assert (plan.side, plan.repeats) == (1024, 1) and plan.depth % DEPTH_STEP == 0
    assert plan.planned_s == pytest.approx(affine(1024, plan.depth)) == pytest.approx(500e-6, rel=0.01)
    plan = plan_work(20e-3, 1024, (128, affine(1024, 128)), (1024, affine(1024, 1024)))  # past MAX_DEPTH: repeated
    assert plan.repeats == 12 and plan.depth <= MAX_DEPTH and plan.planned_s == pytest.approx(20e-3, rel=0.01)
    assert plan.describe(0.4).startswith(f"12 x a 1024x{plan.depth} @ {plan.depth}x1024 matmul after each call: ")
    assert plan.describe(0.4).endswith(" us planned for 20000.0 us asked (+5.0% of the 400000.0 us step)")
    with pytest.raises(ValueError, match="nothing to plan"):
        plan_work(0.0, 1024, (128, 1e-6), (256, 2e-6))


class FakeWork:
    """Products whose times are known (:func:`affine` unless told), a step whose time is known."""

    def __init__(self, step_s, product=affine):
        self.step_s, self.product, self.asked = step_s, product, []

    def product_seconds(self, side, depth):
        self.asked.append((side, depth))
        return self.product(side, depth)

    def step_seconds(self, step):
        step()
        return self.step_s

    def runner(self, plan):
        return lambda: None


def test_the_widest_product_whose_shallowest_takes_half_the_target_is_made_deep_enough():
    work = FakeWork(step_s=2e-3)  # 100 us asked; a 1024-wide shallow product takes 15 us, a 2048-wide 59 us > 50
    plan = calibrate(work, work.step_s, 0.05)
    assert [s for s, d in work.asked if d == SHALLOW] == [32, 64, 128, 256, 512, 1024, 2048]
    assert plan.side == 1024 and plan.planned_s == pytest.approx(100e-6, rel=TOLERANCE)
    assert len(work.asked) == 9  # 7 sides, a proportional guess, the plan timed


def test_a_product_not_affine_in_depth_is_fitted_again_until_within_tolerance():
    work = FakeWork(step_s=2e-3, product=lambda side, depth: 1e-6 + (depth / 1000) ** 1.5 * 20e-6 * (side / 2048) ** 2)
    plan = calibrate(work, work.step_s, 0.05)
    assert abs(plan.planned_s / 100e-6 - 1) <= TOLERANCE
    assert plan.planned_s == pytest.approx(work.product(plan.side, plan.depth) * plan.repeats)  # timed, not fitted


def test_where_the_smallest_product_is_longer_than_the_target_one_is_run_and_said():
    work = FakeWork(step_s=20e-6, product=lambda side, depth: 2e-6 + side * depth * 1e-13)
    plan = calibrate(work, work.step_s, 0.05)  # 1 us asked, the smallest product takes 2 us
    assert (plan.side, plan.depth, plan.repeats) == (32, DEPTH_STEP, 1) and plan.planned_s > 1e-6
    assert plan.describe(20e-6).endswith("2.0 us planned for 1.0 us asked (+10.0% of the 20.0 us step)")


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
    threads = torch.get_num_threads()
    # one thread: with more, the CPU time of workers waiting on each other moves with the load (a loaded 2-core CI
    # run planned 4.5 ms for 10 ms: its calibration points were timed slower than the plan then ran)
    torch.set_num_threads(1)
    try:
        work = MatmulWork(torch.device("cpu"))
        plan = calibrate(work, 20e-3, 0.5)  # 10 ms of extra work
        took = work.step_seconds(work.runner(plan))
    finally:
        torch.set_num_threads(threads)
    assert 0.4 * plan.planned_s <= took <= 3 * plan.planned_s, (plan, took)
    assert plan.planned_s == pytest.approx(10e-3, rel=0.5)


def test_a_plan_is_made_once_per_case_for_every_input_set(monkeypatch):
    made = []

    def factory(device):
        made.append(device)
        return FakeWork(1e-3)

    monkeypatch.setattr(slowed, "calibrate", lambda work, step_s, f: made.append("plan") or WorkPlan(64, 32, 1, 1, 1))
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
