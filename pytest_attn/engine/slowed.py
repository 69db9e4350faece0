"""A back end made slower on purpose, by real work, to show that the regression gate catches a slowdown.

``--attn-inject-slowdown=5%`` wraps every back end: after each call it runs a calibrated amount of
extra matrix-product work -- on a GPU, bf16 matmuls on the same stream (so they land in the CUDA graph
and in the kernel-sum timer like a slower kernel would, and draw tensor-core power as attention does);
on a CPU, fp32 matmuls. An earlier version spun a cheap kernel (``torch.cuda._sleep``) instead: it drew
little power, so on a power-capped H200 the attention kernel after it ran at a higher clock, and 6 %
asked gave only +1 to +5 %. fp32 products (no tensor cores) moved the clock less but were caught less: 189
against bf16's 195 SLOWER of 206 on one H200 (docs/gpu-validation.md#the-stored-baseline-gate).

The work is one product as wide as fits -- a ``side x side`` output, the largest whose shallowest product
takes at most half the target, so it fills the GPU and draws the power of a GPU-filling kernel -- made
long enough by its depth (the inner dimension), not by repeating a small one. Repeated small (1024^2)
products left most SMs idle: on power-capped H100 steps the clock rose under them and 5 % asked read
+0 to +3 % (docs/gpu-validation.md#the-stored-baseline-gate).

Calibration (:func:`calibrate`): the timed step's own time ``T`` is measured, so the extra work should
take ``f x T``; on a GPU both in device time (the sum of kernel durations, as the kernel-sum timer reads
them). A product's time is affine in its depth: two depths fit it (:func:`plan_work`), the planned
product is timed, and a plan more than :data:`TOLERANCE` off is fitted again through it (twice at most). Where even the
smallest product is longer than the target (decode steps of a few us), one is run and the injected share
is what it is -- the description says how much was asked and how much was planned. Names are unchanged,
so the gate compares the slowed run with the stored baseline.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Protocol

from ..backends.base import ForwardFn
from ..core.case import AttnCase
from ..core.layouts import Inputs
from . import timers
from .inputs import make_step
from .profiler import device_seconds

SIDES = (32, 64, 128, 256, 512, 1024, 2048, 4096)  # a product's output is side x side
SHALLOW = 128  # the depth each side is first timed at
DEPTH_STEP = 32  # depths are multiples of this (tensor-core tiles)
MAX_DEPTH = 16384  # deeper than this, the product is repeated instead
TOLERANCE = 0.03  # a planned product further than this off its share of the target is planned again
#: A step longer than this is calibrated on two traced calls, not three runs of five (timing a 1.5 s step 16
#: times made an injected run's set-up ten times longer: docs/gpu-validation.md#the-stored-baseline-gate).
LONG_STEP_S = 0.05


@dataclass(frozen=True)
class WorkPlan:
    side: int  # the product's output is side x side
    depth: int  # its inner dimension
    repeats: int
    planned_s: float  # repeats x the measured (else fitted) time of one product
    target_s: float

    def describe(self, step_s: float) -> str:
        share = self.planned_s / step_s if step_s > 0 else 0.0
        return (f"{self.repeats} x a {self.side}x{self.depth} @ {self.depth}x{self.side} matmul after each call:"
                f" {self.planned_s * 1e6:.1f} us planned for {self.target_s * 1e6:.1f} us asked ({share:+.1%} of"
                f" the {step_s * 1e6:.1f} us step)")


def _round_depth(depth: float) -> int:
    return int(min(MAX_DEPTH, max(DEPTH_STEP, DEPTH_STEP * round(depth / DEPTH_STEP))))


def plan_work(target_s: float, side: int, first: tuple[int, float], second: tuple[int, float]) -> WorkPlan:
    """The depth and repeat count of ``side``-wide products closest to ``target_s`` of extra work, from two
    (depth, seconds) points of one product, through which its time is taken as affine in depth. Pure."""
    if target_s <= 0:
        raise ValueError(f"nothing to plan: target {target_s!r} s")
    (d1, t1), (d2, t2) = sorted([first, second])
    slope = (t2 - t1) / (d2 - d1) if d2 != d1 else t2 / d2
    slope = slope if slope > 0 else t2 / d2  # a flat or noisy pair: proportional through the deeper point
    at = lambda depth: t1 + slope * (depth - d1)  # noqa: E731
    repeats = max(1, math.ceil(target_s / at(MAX_DEPTH)))
    depth = _round_depth(d1 + (target_s / repeats - t1) / slope)
    return WorkPlan(side, depth, repeats, repeats * max(at(depth), 0.0), target_s)


class ExtraWork(Protocol):
    """Matmul work on one device: the time of one product of a shape, and running a plan."""

    def product_seconds(self, side: int, depth: int) -> float: ...

    def runner(self, plan: WorkPlan) -> Callable[[], None]: ...

    def step_seconds(self, step: Callable[[], Any]) -> float: ...


class MatmulWork:
    """Real matrix products: bf16 on a GPU, fp32 on a CPU. On a GPU the step and the products are timed
    by their device time (CUPTI), the currency of the kernel-sum timer that short cases use: timed with
    events, a 32^2 product read 13.5 us of launch overhead for ~2 us of kernel, and 5 % asked added too little
    (docs/gpu-validation.md#the-stored-baseline-gate)."""

    def __init__(self, device: Any) -> None:
        import torch

        self.device = device
        self.cuda = device.type == "cuda"
        self.dtype = torch.bfloat16 if self.cuda else torch.float32

    def _operands(self, side: int, depth: int) -> tuple[Any, Any, Any]:
        import torch

        a = torch.randn(side, depth, device=self.device).to(self.dtype)
        b = torch.randn(depth, side, device=self.device).to(self.dtype)
        return a, b, torch.empty(side, side, device=self.device, dtype=self.dtype)

    def runner(self, plan: WorkPlan) -> Callable[[], None]:
        import torch

        a, b, c = self._operands(plan.side, plan.depth)

        def run() -> None:
            for _ in range(plan.repeats):
                torch.mm(a, b, out=c)

        return run

    def product_seconds(self, side: int, depth: int) -> float:
        return self.step_seconds(self.runner(WorkPlan(side, depth, 1, 0.0, 0.0)))

    def step_seconds(self, step: Callable[[], Any]) -> float:
        """One call's time: on a GPU its device time, the least of three traced runs of five calls (of two
        single calls for a step over :data:`LONG_STEP_S`); on a CPU the median of five; after a warm call."""
        if self.cuda:
            import torch

            t0 = timers.CPU_CLOCK()
            step()  # the warm call, timed roughly: a long step is traced fewer times
            torch.cuda.synchronize()
            long = timers.CPU_CLOCK() - t0 > LONG_STEP_S
            return device_seconds(step, 1 if long else 5, trials=2 if long else 3, warm=False)
        step()
        times = []
        for _ in range(5):
            t0 = timers.CPU_CLOCK()
            step()
            times.append(timers.CPU_CLOCK() - t0)
        return sorted(times)[2]


#: How the extra work is made for a device (tests replace it with fakes on a fake clock).
WORK_FACTORY: Callable[[Any], ExtraWork] = MatmulWork


def calibrate(work: ExtraWork, step_s: float, fraction: float) -> WorkPlan:
    """The widest product whose shallowest takes at most half the target (sides timed from the smallest up, so
    calibrating costs about the target, not a 4096-wide product on a CPU), made as deep as the target asks."""
    target = fraction * step_s
    side, shallow = SIDES[0], work.product_seconds(SIDES[0], SHALLOW)
    for wider in SIDES[1:]:
        if shallow > target / 2:
            break
        took = work.product_seconds(wider, SHALLOW)
        if took > target / 2:
            break
        side, shallow = wider, took
    guess = _round_depth(SHALLOW * target / shallow)  # proportional: a first second point near the target
    points = [(SHALLOW, shallow), (guess, work.product_seconds(side, guess))] if guess != SHALLOW else \
        [(SHALLOW, shallow), (SHALLOW, shallow)]
    plan = plan_work(target, side, points[0], points[1])
    for refits in range(3):  # time the plan; where it is off, fit again through it (twice at most)
        took = work.product_seconds(side, plan.depth)
        plan = dataclasses.replace(plan, planned_s=plan.repeats * took)
        nearest = min(points, key=lambda p: abs(p[0] - plan.depth))
        if abs(plan.planned_s / target - 1) <= TOLERANCE or plan.depth in (DEPTH_STEP, MAX_DEPTH) \
                or nearest[0] == plan.depth or refits == 2:
            return plan
        points = [nearest, (plan.depth, took)]
        plan = plan_work(target, side, points[0], points[1])
    return plan


class SlowedBackend:
    """``inner`` with a calibrated amount of extra matmul work after every call."""

    def __init__(self, inner: Any, fraction: float) -> None:
        self._inner = inner
        self.fraction = fraction
        self.description = f"{inner.description}, slowed by {fraction:.1%} on purpose (--attn-inject-slowdown)"
        self.last_plan = ""
        self._plans: dict[str, WorkPlan] = {}  # by case id: every rotated input set gets the first's plan

    def __getattr__(self, name: str) -> Any:
        return getattr(self._inner, name)

    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn:
        forward = self._inner.prepare(case, inputs)
        work = WORK_FACTORY(inputs.q.device)
        if case.id not in self._plans:
            step_s = work.step_seconds(make_step(case, forward, inputs))  # the whole timed step
            self._plans[case.id] = calibrate(work, step_s, self.fraction)
            self.last_plan = self._plans[case.id].describe(step_s)
        extra = work.runner(self._plans[case.id])

        def slowed() -> Any:
            out = forward()
            extra()
            return out

        if hasattr(forward, "cache"):  # a call on a KV cache: the checks read the cache it writes
            slowed.cache = forward.cache  # type: ignore[attr-defined]
        return slowed

    def expression(self, case: AttnCase) -> str:
        inner = getattr(self._inner, "expression", None)
        base = inner(case) if callable(inner) else ""
        return "; ".join(filter(None, [base, f"slowed on purpose: {self.last_plan}" if self.last_plan else ""]))
