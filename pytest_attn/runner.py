"""Runs one case end to end: checks, inputs, correctness check, warm-up, timer choice, sampling,
figures. pytest-free: it raises :class:`CaseSkipped` or :class:`CaseFailed`, the plugin turns those
into pytest outcomes. Memory is released before either is raised, so the session goes on."""

from __future__ import annotations

import gc
import time
import traceback
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from . import flops
from .backends.base import Unsupported
from .dispatch import KernelCall, profile_kernels
from .metrics import figures
from .profiling import nvtx_range, peak_memory_bytes, write_trace
from .reference import RowCheck, check_rows
from .result import CaseResult
from .stopping import (
    StopRule,
    WarmupRule,
    choose_timer,
    graph_calls_per_replay,
    input_sets,
    median,
    relative_precision,
)
from .throttle import assess
from .timing import (
    CpuTimer,
    CudaEventTimer,
    CudaGraphTimer,
    KernelSumTimer,
    L2Flush,
    Timer,
    WarmupReport,
    sample_until,
    warm_up,
)

if TYPE_CHECKING:
    from .backends.base import Backend
    from .case import AttnCase
    from .device import DeviceInfo
    from .inputs import Inputs


class CaseSkipped(Exception):
    """The case cannot run here; the message says why and what to do."""


class CaseFailed(Exception):
    """The case ran and failed (wrong output, out of memory, a back-end error)."""


@dataclass(frozen=True)
class RunSettings:
    timer: str = "auto"
    stop: StopRule = field(default_factory=StopRule)
    warmup: WarmupRule = field(default_factory=WarmupRule)
    verify: bool = True
    peak_tflops: float | None = None
    memory_headroom: float = 0.9  # use at most this fraction of free memory
    drop_throttled: bool = False  # drop samples under 75 % of the nominal SM clock (nvbench's rule)
    verify_timing: bool = False  # one extra profiled run: kernel time vs the reported median
    trace_dir: Path | None = None  # one Chrome trace per case here
    clock_lock: str = "not locked"  # the achieved clock-lock state, recorded with every result


def required_bytes(case: AttnCase, backend: Backend, device: DeviceInfo) -> int:
    """Device memory one input set of this case needs: its tensors, gradients for fwd+bwd, the back
    end's workspace and the L2-flush buffer."""
    tensors = flops.min_bytes(case)
    return tensors + backend.workspace_bytes(case) + 2 * (device.l2_bytes or 0)


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def check_can_run(case: AttnCase, backend: Backend, device: DeviceInfo, free_bytes: int | None) -> None:
    """Raise :class:`CaseSkipped` with the reason when the case cannot run here."""
    if backend.needs_cuda and not device.is_cuda:
        raise CaseSkipped("no CUDA device")
    why = backend.available()
    if why:
        raise CaseSkipped(why)
    if case.direction == "fwd+bwd" and not backend.has_backward:
        raise CaseSkipped(f"{backend.name} has no backward pass")
    why = backend.supports(case, device)
    if why:
        raise CaseSkipped(why)
    if device.is_cuda and free_bytes is not None:
        need = required_bytes(case, backend, device)
        if need > free_bytes:
            raise CaseSkipped(
                f"needs about {_gib(need)} of GPU memory ({case.describe()}) but {_gib(free_bytes)} is free;"
                " skipped before allocating"
            )


def make_step(case: AttnCase, forward: Any, inputs: Inputs) -> Any:
    if case.direction == "fwd":
        return forward
    import torch

    tensors = (inputs.q, inputs.k, inputs.v)
    grad_out = inputs.grad_out

    def step() -> Any:
        return torch.autograd.grad(forward(), tensors, grad_out)

    return step


MODES = ("measure", "once", "kernels")


def run_case(
    case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings, *, measure: bool = True,
    label: str = "",
) -> CaseResult | None:
    """Measure one case (with ``measure=False``: check it and run it once, time nothing). ``label``
    (the test id) names its NVTX ranges and trace. Raises CaseSkipped or CaseFailed, with memory
    released."""
    out = _run(case, backend, device, settings, "measure" if measure else "once", label or case.id)
    assert out is None or isinstance(out, CaseResult)
    return out


def case_kernels(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings) -> list[KernelCall]:
    """Check the case and return the GPU kernels one warm call launches (nothing timed).
    Raises CaseSkipped or CaseFailed like :func:`run_case`."""
    out = _run(case, backend, device, settings, "kernels", case.id)
    assert isinstance(out, list)
    return out


def _run(
    case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings, mode: str, label: str
) -> CaseResult | list[KernelCall] | None:
    free = None
    if device.is_cuda:
        import torch

        gc.collect()
        torch.cuda.empty_cache()
        free = int(torch.cuda.mem_get_info()[0] * settings.memory_headroom)
    check_can_run(case, backend, device, free)
    skipped: str | None = None
    failed: str | None = None
    try:
        return _measure(case, backend, device, settings, free, mode, label)
    except (CaseSkipped, Unsupported) as exc:
        skipped = str(exc)
    except CaseFailed as exc:
        failed = str(exc)
    except Exception as exc:
        failed = _describe_failure(case, exc)
    # The exception and its frames (holding the case's tensors) are gone here: free the memory.
    _release(device)
    if skipped is not None:
        raise CaseSkipped(skipped)
    raise CaseFailed(failed)


def _describe_failure(case: AttnCase, exc: Exception) -> str:
    head = f"{case.id} failed: {type(exc).__name__}: {exc}"
    if "out of memory" in str(exc).lower():
        head += (f"\nThe case needed more GPU memory than the estimate ({case.describe()}); "
                 "its memory was released and the session goes on.")
    return head + "\n\n" + "".join(traceback.format_exception(exc))


def _release(device: DeviceInfo) -> None:
    gc.collect()
    if device.is_cuda:
        import torch

        torch.cuda.empty_cache()


@dataclass
class Prepared:
    """A case ready to sample: its timer, and how it got there."""

    timer: Timer
    kind: str
    note: str
    input_sets: int
    warmup: WarmupReport
    check: RowCheck | None


@dataclass
class _Setup:
    steps: list[Any]
    check: RowCheck | None
    flush: L2Flush | None
    dev: Any


def _setup(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings) -> _Setup:
    """Inputs, the back end's callable, and the sampled-row check of its output."""
    import torch

    from .inputs import make_inputs

    dev = torch.device("cuda", device.index or 0) if device.is_cuda else torch.device("cpu")
    first = make_inputs(case, backend.layout, dev, requires_grad=case.direction == "fwd+bwd", seed=0)
    forward = backend.prepare(case, first)  # may raise Unsupported with the library's words
    check = None
    if settings.verify:
        with torch.no_grad():
            out = forward()
        check = check_rows(case, first, out, backend.layout)
        del out
        if not check.ok:
            raise CaseFailed(check.message(case))
    flush = L2Flush(device.l2_bytes, dev) if device.is_cuda else None
    return _Setup([make_step(case, forward, first)], check, flush, dev)


def _build_timer(
    case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings, free: int | None, setup: _Setup
) -> Prepared:
    """Warm up, choose the timer by call length, add rotated input sets and capture the graph."""
    import torch

    from .inputs import make_inputs

    steps, flush = setup.steps, setup.flush

    def timed_once() -> float:
        return CpuTimer(steps).sample() if flush is None else CudaEventTimer(steps, flush).sample()

    report = warm_up(timed_once, settings.warmup)
    kind = choose_timer(settings.timer, device.is_cuda, report.estimate_s)
    if kind == "cpu" or flush is None:  # a CPU run, whatever was asked
        return Prepared(CpuTimer(steps), "cpu", "", 1, report, setup.check)
    if kind == "cuda-event":
        note = "short call timed with events: includes host launch overhead" if report.estimate_s < 1e-3 else ""
        return Prepared(CudaEventTimer(steps, flush), kind, note, 1, report, setup.check)
    per_set = flops.min_bytes(case)
    sets = input_sets(per_set, device.l2_bytes)
    if free is not None:  # extra copies may use half of what the first one left free
        spare = free - required_bytes(case, backend, device)
        sets = max(1, min(sets, spare // (2 * per_set)))
    for seed in range(1, sets):
        extra = make_inputs(case, backend.layout, setup.dev, requires_grad=case.direction == "fwd+bwd", seed=seed)
        steps.append(make_step(case, backend.prepare(case, extra), extra))
    calls = graph_calls_per_replay(report.estimate_s, len(steps), kernel_sum=kind == "kernel-sum")
    inner: CudaGraphTimer | CudaEventTimer
    note = ""
    try:
        inner = CudaGraphTimer(steps, calls, flush)
        for _ in range(2):  # the first replays upload the graph
            inner.sample()
    except Exception as exc:  # capture is not possible for every library: fall back, say why
        torch.cuda.synchronize()
        note = f"graph capture failed ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
        steps, sets = steps[:1], 1
        inner = CudaEventTimer(steps, flush)
        if kind == "cuda-graph":
            return Prepared(inner, "cuda-event", note + "; timed with events", 1, report, setup.check)
    if kind == "cuda-graph":
        return Prepared(inner, kind, note, sets, report, setup.check)
    try:
        return Prepared(KernelSumTimer(inner, flush), kind, note, sets, report, setup.check)
    except Exception as exc:  # no CUPTI (profiler unavailable): the graph or event figure stands
        why = f"the profiler could not read kernel times ({type(exc).__name__}: {exc})"
        return Prepared(inner, inner.kind, "; ".join(filter(None, [note, why])), sets, report, setup.check)


def prepare_timer(
    case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings, free: int | None = None
) -> Prepared:
    """Everything before the first sample (for tools that inspect the timer, e.g. a profiler check)."""
    return _build_timer(case, backend, device, settings, free, _setup(case, backend, device, settings))


def _kernels(step: Any, device: DeviceInfo) -> list[KernelCall]:
    """The kernels of one call, or [] where the profiler cannot say (no CUDA, no CUPTI)."""
    if not device.is_cuda:
        return []
    try:
        return profile_kernels(step)
    except Exception:  # the profiler is a diagnostic here: its failure must not fail the case
        return []


def _measure(
    case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings, free: int | None, mode: str,
    label: str,
) -> CaseResult | list[KernelCall] | None:
    started = time.perf_counter()
    setup = _setup(case, backend, device, settings)
    if mode == "once":
        setup.steps[0]()
        return None
    if mode == "kernels":
        if not device.is_cuda:
            raise CaseSkipped("kernel names need a CUDA device and the PyTorch profiler")
        setup.steps[0]()  # warm: lazy initialisation and autotuning stay out of the profile
        return profile_kernels(setup.steps[0])
    with nvtx_range(f"{label} warm-up", device.is_cuda):
        prepared = _build_timer(case, backend, device, settings, free, setup)
    prepare_s = time.perf_counter() - started
    with nvtx_range(f"{label} samples", device.is_cuda):
        sampling = sample_until(prepared.timer, settings.stop, read_sm_clock=device.nvml.sm_clock_mhz,
                                read_reasons=device.nvml.clocks_event_reasons)
    peak_memory = _peak_memory(setup.steps[0]) if device.is_cuda else None
    if settings.trace_dir is not None:
        write_trace(setup.steps[0], settings.trace_dir / f"{_file_name(label)}.json")
    keep, throttle = assess(sampling.sample_reasons, sampling.sample_clocks, device.max_sm_clock_mhz,
                            drop=settings.drop_throttled)
    samples = [sampling.samples_s[i] for i in keep]
    clocks = [c for i in keep if (c := sampling.sample_clocks[i])]
    timing_check = None
    if settings.verify_timing and device.is_cuda:
        from .selfcheck import TimingCheck, profiled_kernel_time

        timing_check = TimingCheck(median(samples), profiled_kernel_time(prepared.timer, setup.flush))
    work = flops.work(case)
    clock = median(clocks) if clocks else None
    figs = figures(work, median(samples), device.peak(case.dtype, settings.peak_tflops), clock)
    return CaseResult(
        case=case,
        work=work,
        figures=figs,
        samples_s=samples,
        precision=relative_precision(samples),
        stop_reason=sampling.stop_reason,
        timer=prepared.kind,
        timer_note=prepared.note,
        calls_per_sample=prepared.timer.calls_per_sample,
        input_sets=prepared.input_sets,
        warmup=prepared.warmup,
        sm_clocks_mhz=clocks,
        check=prepared.check,
        elapsed_s=time.perf_counter() - started,
        replay_s=list(getattr(prepared.timer, "replay_s", [])),
        kernels=_kernels(setup.steps[0], device),
        expression=_expression(backend, case),
        prepare_s=prepare_s,
        throttle=throttle,
        clock_lock=settings.clock_lock,
        timing_check=timing_check,
        peak_memory_bytes=peak_memory,
    )


def _peak_memory(step: Any) -> int | None:
    """A diagnostic like the kernel names: its failure leaves the field empty, not the case failed."""
    try:
        return peak_memory_bytes(step)
    except Exception:
        return None


def _file_name(label: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in label)[:200]


def _expression(backend: Backend, case: AttnCase) -> str:
    describe = getattr(backend, "expression", None)
    return describe(case) if callable(describe) else ""
