"""Measuring one case: set up (inputs, the back end's call, the check against the reference), warm up,
choose and build the timer (:func:`prepare`), sample (:func:`measure`), and the result record
(:func:`record_of`). The one-process runner (:mod:`.runner`) samples until its stop rule is met; an A/B arm
(:mod:`.ab.worker`) samples in blocks, in turn with the other arm, and builds its record from all of them."""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, TypeVar

from ..backends.base import Backend
from ..core import flops
from ..core.case import AttnCase
from ..core.device import DeviceInfo
from ..core.kernel_names import KernelCall
from ..core.metrics import figures
from ..core.record import ASKED_CHOICE, PINNED_CHOICE, Check, Clocks, Record, Timing, TimingCheck
from ..core.stats import median, relative_drift, relative_precision
from ..core.sustained import sustained
from ..core.throttle import assess
from ..oracle.cache import check_cache
from ..oracle.checks import check_finite, check_rows, only_rows_with_keys
from ..oracle.grad_check import check_grad_rows
from . import timers
from .failures import no_graph, user_call
from .inputs import make_inputs, make_step, torch_device
from .load_phase import run_load_phase
from .nvml import Nvml
from .profiler import (
    device_activity,
    nvtx_range,
    peak_memory_bytes,
    profile_kernels,
    profiled_kernel_time,
    write_trace,
)
from .sampling import Sampling, WarmupReport, sample_until, warm_up
from .settings import CaseFailed, RunSettings, TooLongHere, WrongOutput, required_bytes
from .spotcheck import SpotCheck, check_clocks, spot_count, watched_call
from .timers import (
    BuiltTimer,
    CaptureError,
    CpuTimer,
    CudaEventTimer,
    L2Flush,
    build_timer,
    choose_timer,
    input_sets,
    l2_condition,
)

T = TypeVar("T")


# ---- setting up -----------------------------------------------------------------------------------
@dataclass
class Setup:
    """A case after the check before timing: the step a sample times (the first input set's), the check's
    summary, and the spot checks that sampling makes of the same call."""

    step: Callable[[], Any]
    check: Check | None
    spot: SpotCheck | None


def _setup(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings) -> Setup:
    """The first input set's step, after the checks of one call: every output and gradient element
    finite, sampled rows of every sequence against the reference (output, and gradients for fwd+bwd), the
    inputs left as they were and the work done when the call returned (:func:`.spotcheck.watched_call`)."""
    import torch

    first = make_inputs(case, backend.layout, torch_device(device), requires_grad=case.direction == "fwd+bwd",
                        seed=0)
    # may raise Unsupported with the library's words; its own failure, or the call's, reads as three lines
    forward = user_call(case, "prepare", lambda: backend.prepare(case, first))

    def call() -> tuple[Any, tuple[Any, ...] | None, float, tuple[int, int]]:
        t0 = time.perf_counter()
        with torch.set_grad_enabled(case.direction == "fwd+bwd"):
            out, digest = user_call(case, "forward", lambda: watched_call(forward, first, device, case,
                                                                          "the first time it was called"))
            grads = _backward(case, out, first) if case.direction == "fwd+bwd" else None
        _sync(device)
        return out, grads, time.perf_counter() - t0, digest

    out, grads, took, digest = call()
    if not device.is_cuda and took > settings.cpu_call_limit_s:
        # the process's first call pays one-time costs (autograd's threads, torch's kernels loading): judge a second
        out, grads, took, digest = call()
        _refuse_slow_cpu_call(case, took, settings)
    check = _check(case, first, out.detach(), backend.layout, grads) if settings.verify else None
    view = getattr(forward, "cache", None)
    if settings.verify and view is not None:
        problem = check_cache(case, first.k, first.v, view)
        if problem:
            raise CaseFailed(f"{case.id} writes its KV cache wrongly before timing: {problem}")
        check = dataclasses.replace(check, cache=f"the cache of {case.batch} requests, position by position") \
            if check is not None else None
    del out, grads
    spot = SpotCheck(case, forward, first, device, backend.layout, last=digest) if settings.verify else None
    return Setup(make_step(case, forward, first), check, spot)


def _backward(case: AttnCase, out: Any, inputs: Any) -> tuple[Any, ...]:
    """dq, dk, dv of the first call's output; :class:`CaseFailed` in three lines where the back end's backward
    fails, or its output has no graph to run one on."""
    import torch

    if not getattr(out, "requires_grad", False):
        raise CaseFailed(no_graph(case))
    return user_call(case, "backward", lambda: tuple(torch.autograd.grad(out, (inputs.q, inputs.k, inputs.v),
                                                                         inputs.grad_out)))


def _sync(device: DeviceInfo) -> None:
    if device.is_cuda:
        import torch

        torch.cuda.synchronize()


def _check(case: AttnCase, inputs: Any, out: Any, layout: str, grads: tuple[Any, ...] | None) -> Check:
    """The checks of :func:`_setup`; raises :class:`CaseFailed` with the first problem found."""
    t0 = time.perf_counter()
    tensors = {"out": out, **(dict(zip(("dq", "dk", "dv"), grads, strict=True)) if grads else {})}
    problem = check_finite(only_rows_with_keys(case, layout, tensors))
    if problem is not None:
        raise WrongOutput(problem.message(case))
    rows = check_rows(case, inputs, out, layout)
    if not rows.ok:
        raise WrongOutput(rows.message(case))
    summary = rows.summary()
    if grads is not None:
        grad = check_grad_rows(case, inputs, out, layout, grads)  # type: ignore[arg-type]
        if not grad.ok:
            raise WrongOutput(grad.message(case))
        summary = dataclasses.replace(summary, grad_rows=grad.rows_checked, grad_max_error=grad.max_error,
                                      grad_allowed=grad.allowed, grad_tensor=grad.tensor,
                                      grad_kv_heads=grad.kv_heads_checked)
    return dataclasses.replace(summary, seconds=time.perf_counter() - t0)


def _refuse_slow_cpu_call(case: AttnCase, step_s: float, settings: RunSettings) -> None:
    """A CPU case whose timed step takes longer than a call may here: measuring it would take some 20
    calls, and a call in torch's C++ cannot be interrupted."""
    if step_s > settings.cpu_call_limit_s:
        gflop = flops.flops(case) / 1e9
        raise TooLongHere(
            f"one call takes {step_s:.1f} s on this CPU, over the {settings.cpu_call_limit_s:g} s a call may take"
            " here (a measurement makes some 20 calls); skipped.", gflop, gflop * settings.cpu_call_limit_s / step_s)


def _caps_clock(device: DeviceInfo) -> Callable[[], float]:
    """The clock the warm-up's and the sampling's time caps read: on a CPU the one its timer reads (a test's fake
    clock then governs both, so a run on it does the same work however loaded the machine is), else the host's."""
    return time.perf_counter if device.is_cuda else timers.CPU_CLOCK


def _timer(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings, free: int | None,
           step: Callable[[], Any]) -> tuple[BuiltTimer, WarmupReport, L2Flush | None, str]:
    """Warm up with the call being timed, then the timer: the one the case's baseline record names where
    the run is gated (``settings.pin``), else the one its length calls for. Returns why, in words."""
    flush = L2Flush(device.l2_bytes, torch_device(device)) if device.is_cuda else None
    events = CudaEventTimer([step], flush) if flush is not None else None
    report = warm_up(CpuTimer([step]).sample if events is None else events.sample, settings.warmup,
                     clock=_caps_clock(device))
    report.launch_s = events.launch_s if events is not None else []
    pin = settings.pin if device.is_cuda and settings.timer == "auto" else None

    def more_sets(have: int) -> list[Callable[[], Any]]:
        per_set = flops.tensor_bytes(case)
        sets = pin.input_sets if pin is not None else \
            input_sets(per_set, device.l2_bytes, min_sets=settings.min_input_sets)
        if free is not None and device.is_cuda:  # extra copies may use half of what the first one left free
            sets = max(1, min(sets, (free - required_bytes(case, backend, device)) // (2 * per_set)))
        out = []
        for seed in range(have, sets):
            extra = make_inputs(case, backend.layout, torch_device(device),
                                requires_grad=case.direction == "fwd+bwd", seed=seed)
            out.append(make_step(case, backend.prepare(case, extra), extra))
        return out

    estimate_s, why, by_kernels = call_estimate(report, step, device, settings.events_from_s)
    if pin is not None:
        built = build_timer(pin.timer, [step], estimate_s, flush, more_sets, pin)
        return built, report, flush, f"{PINNED_CHOICE}: {pin.describe()}, {pin.input_sets} input" \
                                     f" set(s){'; ' + why if why else ''}"
    kind = choose_timer(settings.timer, device.is_cuda, estimate_s, settings.events_from_s)
    if by_kernels and settings.timer == "auto":
        kind = "kernel-sum"
    if settings.timer != "auto" and device.is_cuda:
        choice = f"{ASKED_CHOICE}{settings.timer}"
    elif not device.is_cuda:
        choice = "a CPU run"
    else:
        choice = why or (f"a call {'under' if kind == 'kernel-sum' else 'of'} {settings.events_from_s * 1e3:g} ms"
                         f" {'' if kind == 'kernel-sum' else 'or more '}(the warm-up: {estimate_s * 1e3:.3g} ms by"
                         " events)")
    return build_timer(kind, [step], estimate_s, flush, more_sets), report, flush, choice


#: A long call whose events read this much more than its kernels leaves the GPU idle while the host launches (or
#: waits): its events figure moves with the host (5-8 % between two H100 hosts), and the gate counts the gap as noise
#: (gaps of 1.5-4.5 % left 17 events-timed cases of an H200 run undecided at 5 % injected:
#: docs/gpu-validation.md#the-stored-baseline-gate).
HOST_GAP = 0.01


def call_estimate(report: WarmupReport, step: Callable[[], Any], device: DeviceInfo,
                  events_from_s: float) -> tuple[float, str, bool]:
    """A call's length for the timer choice, why where it is not the warm-up's, and whether its kernels must time
    it however long it is. A warm-up timed by events reads the host's launches when they take longer than the
    GPU's work (a cuDNN fwd+bwd step of 200 us read 5 ms or more once in a full run on an H100). So a reading of
    ``events_from_s`` or more is checked against the kernels of one profiled call, and the kernels decide: a call
    whose kernels are short is timed by them; a long one whose events read over :data:`HOST_GAP` more than its
    kernels has the host's gaps in its events figure, and is timed by its kernels too."""
    estimate = report.estimate_s
    if not device.is_cuda or estimate < events_from_s:
        return estimate, "", False
    try:
        kernels = sum(seconds for _, seconds in device_activity(step))
    except Exception as exc:  # no CUPTI: the warm-up's figure stands
        unread = f"the warm-up read {estimate * 1e3:.3g} ms by events; kernels not read ({type(exc).__name__})"
        return estimate, unread, False
    said = (f"the warm-up read {estimate * 1e3:.3g} ms a call by events ({report.describe()}), one profiled call's"
            f" kernels {kernels * 1e3:.3g} ms")
    if kernels > 0:
        report.host_gap = max(0.0, 1 - kernels / estimate)
        report.kernels_s = kernels
    if 0 < kernels < events_from_s:
        return kernels, f"{said}: the host's launches, not the GPU's work; timed by its kernels", True
    if 0 < kernels * (1 + HOST_GAP) < estimate:
        return kernels, (f"{said}: the GPU idles {1 - kernels / estimate:.0%} of the call while the host launches or"
                         " waits, which events would count; timed by its kernels"), True
    return estimate, said, False


@dataclass
class Prepared:
    """A case ready to sample: checked, warm, its timer built (see :func:`prepare`)."""

    case: AttnCase
    backend: Backend
    device: DeviceInfo
    settings: RunSettings
    label: str
    step: Callable[[], Any]
    check: Check | None
    spot: SpotCheck | None
    built: BuiltTimer
    warmup: WarmupReport
    flush: L2Flush | None
    started: float
    setup_s: float
    prepare_s: float
    choice: str = ""  # why this timer (see _timer)


def prepare(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings, free: int | None,
            label: str) -> Prepared:
    """Inputs, the back end's call, the check against the reference, warm-up and the timer: everything
    before the first sample. Raises CaseFailed (a wrong result, a graph that cannot be captured)."""
    started = time.perf_counter()
    setup = _setup(case, backend, device, settings)
    step, check = setup.step, setup.check
    setup_s = time.perf_counter() - started
    with nvtx_range(f"{label} warm-up", device.is_cuda):
        try:
            built, warmup, flush, choice = _timer(case, backend, device, settings, free, step)
        except CaptureError as exc:
            raise CaseFailed(f"{case.id}: not timed: {exc}") from None
    return Prepared(case, backend, device, settings, label, step, check, setup.spot, built, warmup, flush, started,
                    setup_s, time.perf_counter() - started, choice)


def measure(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings, free: int | None,
            label: str, nvml: Nvml) -> Record:
    """One case measured: :func:`prepare`, samples until the stop rule is met, the record."""
    ready = prepare(case, backend, device, settings, free, label)
    count = spot_count(ready.warmup.estimate_s, settings.stop.max_time_s)
    spot = ready.spot.plan(settings.stop.min_samples, count) if ready.spot is not None else None
    with nvtx_range(f"{label} samples", device.is_cuda):
        sampling = sample_until(ready.built.timer, settings.stop, clock=_caps_clock(device),
                                read_sm_clock=nvml.sm_clock_mhz, read_reasons=nvml.clocks_event_reasons,
                                before_sample=spot.before_sample if spot is not None else None)
    check_clocks(case)
    if spot is not None and ready.check is not None:
        ready.check = dataclasses.replace(ready.check, spot_checks=spot.done, spot_seconds=spot.seconds)
    record = record_of(ready, sampling)
    if settings.sustained_s and device.is_cuda:
        with nvtx_range(f"{label} sustained", True):
            readings, how = run_load_phase(list(ready.built.steps) or [ready.step], record.median_s,
                                           settings.sustained_s, nvml)
        loaded = sustained(readings, record.work.flops, record.median_s, record.figures.peak_tflops)
        record = dataclasses.replace(record, sustained=dataclasses.replace(loaded, replayed=how))
    return record


def record_of(p: Prepared, sampling: Sampling, diagnose: bool = True) -> Record:
    """The result record of a prepared case and its samples (throttled ones dropped where asked); without
    ``diagnose``, no kernel names, peak memory or trace (they cost profiled calls)."""
    case, device, settings, built = p.case, p.device, p.settings, p.built
    keep, throttle = assess(sampling.sample_reasons, sampling.sample_clocks, device.max_sm_clock_mhz,
                            drop=settings.drop_throttled)
    samples = [sampling.samples_s[i] for i in keep]
    clocks = [c for i in keep if (c := sampling.sample_clocks[i])]
    diagnostics = _diagnostics(p.step, device, settings, p.label) if diagnose else {"kernels": [], "peak_memory": None}
    timing_check = None
    if settings.verify_timing and device.is_cuda:
        timing_check = TimingCheck(median(samples), profiled_kernel_time(built.timer, p.flush))
    work = flops.work(case)
    clocks_seen = Clocks.of(clocks, settings.clock_lock, throttle)
    replay = getattr(built.timer, "replay_s", [])
    return Record(
        test=p.label if p.label != case.id else "",
        case=case,
        device=device,
        timing=Timing(tuple(samples), median(samples), relative_precision(samples), sampling.stop_reason, built.kind,
                      built.note, built.timer.calls_per_sample, built.input_sets, p.warmup.calls, p.warmup.elapsed_s,
                      p.warmup.settled, prepare_s=p.prepare_s, elapsed_s=time.perf_counter() - p.started,
                      setup_s=p.setup_s, graph_replay_s=median(replay) if replay else None,
                      drift=relative_drift(samples), capture=built.capture,
                      l2=l2_condition(built.cache_kind, built.input_sets, flops.tensor_bytes(case), device.l2_bytes),
                      timer_choice=p.choice, host_gap=p.warmup.host_gap,
                      kernels_s=p.warmup.kernels_s),
        work=work,
        figures=figures(work, median(samples), device.peak(case.dtype, settings.peak_tflops),
                        clocks_seen.sm_clock_mhz),
        clocks=clocks_seen,
        check=p.check,
        kernels=tuple(diagnostics["kernels"]),
        expression=_expression(p.backend, case),
        peak_memory_bytes=diagnostics["peak_memory"],
        timing_check=timing_check,
    )


def _diagnostics(step: Callable[[], Any], device: DeviceInfo, settings: RunSettings, label: str) -> dict[str, Any]:
    """Kernel names, peak memory and the trace: diagnostics, whose failure leaves a field empty and never
    fails the measured case (the profiler may lack CUPTI; a trace folder may vanish mid-run)."""
    out: dict[str, Any] = {"kernels": [], "peak_memory": None}
    if device.is_cuda:
        no_kernels: list[KernelCall] = []
        out["kernels"] = _quietly(lambda: profile_kernels(step), no_kernels)
        out["peak_memory"] = _quietly(lambda: peak_memory_bytes(step), None)
    if settings.trace_dir is not None:
        path = settings.trace_dir / f"{_file_name(label)}.json"
        _quietly(lambda: write_trace(step, path), None)
    return out


def _quietly(fn: Callable[[], T], default: T) -> T:
    try:
        return fn()
    except Exception:
        return default


def _file_name(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:200]


def _expression(backend: Backend, case: AttnCase) -> str:
    describe = getattr(backend, "expression", None)
    return describe(case) if callable(describe) else ""
