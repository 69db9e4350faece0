"""A back end made slower on purpose, by real work, to show that the regression gate catches a slowdown.

``--attn-inject-slowdown=5%`` wraps every back end: after each call it runs a calibrated amount of
extra matrix-product work -- on a GPU, bf16 matmuls on the same stream (so they land in the CUDA graph
and in the kernel-sum timer like a slower kernel would, and draw tensor-core power as attention does);
on a CPU, fp32 matmuls. An earlier version spun a cheap kernel (``torch.cuda._sleep``) instead: it drew
little power, so on a power-capped H200 the attention kernel after it ran at a higher clock, and 6 %
asked gave only +1 to +5 %.

Calibration (:func:`plan_work`): the timed step's own time ``T`` is measured, so the extra work should
take ``f x T``; on a GPU both in device time (the sum of kernel durations, as the kernel-sum timer reads
them; long cases timed with events differ from it by under ~1 %). Matmul sizes are timed from the
smallest up; the largest whose single product takes at most a quarter of that is repeated
``round(f x T / unit)`` times (so rounding costs at most an eighth of the extra time). Where even the
smallest product is longer than the whole target, one is run and the injected share is what it is -- the
description says how much was asked and how much was planned (decode steps under ~26 us, where a 32^2
product's ~2 us of kernel is already over 5 %). What it did on a GPU: docs/gpu-validation.md#the-stored-baseline-gate.
Names are unchanged, so the gate compares the slowed run with the stored baseline.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from ..backends.base import ForwardFn
from ..core.case import AttnCase
from ..core.layouts import Inputs
from . import timers
from .inputs import make_step
from .profiler import device_seconds

SIZES = (4096, 2048, 1024, 512, 256, 128, 64, 32)
MIN_REPEATS = 4
#: A step longer than this is calibrated on two traced calls, not three runs of five (timing a 1.5 s step 16
#: times made an injected run's set-up ten times longer: docs/gpu-validation.md#the-stored-baseline-gate).
LONG_STEP_S = 0.05


@dataclass(frozen=True)
class WorkPlan:
    size: int  # matmul side
    repeats: int
    planned_s: float  # repeats x the measured time of one product
    target_s: float

    def describe(self, step_s: float) -> str:
        share = self.planned_s / step_s if step_s > 0 else 0.0
        return (f"{self.repeats} x a {self.size}^2 matmul after each call: {self.planned_s * 1e6:.1f} us planned for"
                f" {self.target_s * 1e6:.1f} us asked ({share:+.1%} of the {step_s * 1e6:.1f} us step)")


def plan_work(target_s: float, unit_s: Mapping[int, float], min_repeats: int = MIN_REPEATS) -> WorkPlan:
    """The matmul size and repeat count closest to ``target_s`` of extra work, from the measured time of
    one product of each size (``unit_s``). Pure."""
    if target_s <= 0 or not unit_s:
        raise ValueError(f"nothing to plan: target {target_s!r} s, {len(unit_s)} measured sizes")
    sizes = sorted(unit_s, reverse=True)
    size = next((n for n in sizes if unit_s[n] * min_repeats <= target_s), sizes[-1])
    repeats = max(1, round(target_s / unit_s[size]))
    return WorkPlan(size, repeats, repeats * unit_s[size], target_s)


class ExtraWork(Protocol):
    """Matmul work on one device: the time of one product of a size, and running a plan."""

    def unit_seconds(self, size: int) -> float: ...

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

    def _operands(self, size: int) -> tuple[Any, Any, Any]:
        import torch

        a = torch.randn(size, size, device=self.device).to(self.dtype)
        return a, a.t().contiguous(), torch.empty(size, size, device=self.device, dtype=self.dtype)

    def runner(self, plan: WorkPlan) -> Callable[[], None]:
        import torch

        a, b, c = self._operands(plan.size)

        def run() -> None:
            for _ in range(plan.repeats):
                torch.mm(a, b, out=c)

        return run

    def unit_seconds(self, size: int) -> float:
        return self.step_seconds(self.runner(WorkPlan(size, 1, 0.0, 0.0)))

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
    """Time products from the smallest size up until one no longer fits the target (so calibrating
    costs about the target, not a 4096^2 product on a CPU), and plan."""
    target = fraction * step_s
    units: dict[int, float] = {}
    for size in sorted(SIZES):
        units[size] = work.unit_seconds(size)
        if units[size] * MIN_REPEATS > target:
            break
    return plan_work(target, units)


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
