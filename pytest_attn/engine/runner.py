"""Runs one case end to end: can it run here, inputs, correctness check, warm-up, timer choice,
sampling, figures -- and returns its :class:`~pytest_attn.core.record.Record`.

pytest-free: it raises :class:`CaseSkipped` or :class:`CaseFailed`, the plugin turns those into pytest
outcomes. Memory is released before either is raised, so the session goes on.
"""

from __future__ import annotations

import dataclasses
import gc
import time
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from ..backends.base import Backend, Unsupported, refusal
from ..core import flops
from ..core.case import AttnCase
from ..core.device import DeviceInfo
from ..core.kernel_names import KernelCall
from ..core.metrics import figures
from ..core.record import Check, Clocks, Record, Timing, TimingCheck
from ..core.stats import median, relative_drift, relative_precision
from ..core.throttle import assess
from ..oracle.cache import check_cache
from ..oracle.checks import check_finite, check_rows, only_rows_with_keys
from ..oracle.grad_check import check_grad_rows
from .inputs import make_inputs, make_step, torch_device
from .nvml import NoNvml, Nvml
from .probe import host_free_bytes
from .profiler import nvtx_range, peak_memory_bytes, profile_kernels, profiled_kernel_time, write_trace
from .sampling import WarmupReport, sample_until, warm_up
from .stopping import StopRule, WarmupRule
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


class CaseSkipped(Exception):
    """The case cannot run here; the message says why and what to do."""


class CaseFailed(Exception):
    """The case ran and failed (wrong output, out of memory, a back-end error)."""


#: On a CPU, a case whose one call would take longer than this is skipped before it starts: a single
#: call in torch's C++ cannot be interrupted, so Ctrl-C would wait for it (HunyuanVideo: most of an hour),
#: and a case takes some 20 calls (check, warm-up, samples).
CPU_CALL_LIMIT_S = 0.5
#: Attention on a CPU reaches about this share of a matrix product's rate (measured here, torch 2.13, a
#: 1 x 8 x 1024 x 64 causal case: SDPA's math kernel 15 GFLOP/s, its flash kernel 85, against fp32 and bf16
#: matmuls at 100 and 195 GFLOP/s): estimates err towards running.
CPU_ATTENTION_SHARE = 0.125


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
    cpu_gflops: dict[str, float] | None = None  # a CPU run: its matmul rate per dtype, to refuse cases it cannot finish
    cpu_call_limit_s: float = CPU_CALL_LIMIT_S


def required_bytes(case: AttnCase, backend: Backend, device: DeviceInfo) -> int:
    """Device memory one input set of this case needs: its tensors, gradients for fwd+bwd, the back
    end's workspace and the L2-flush buffer."""
    return flops.min_bytes(case) + backend.workspace_bytes(case) + 2 * (device.l2_bytes or 0)


def _gib(n: float) -> str:
    return f"{n / 2**30:.2f} GiB"


def check_can_run(case: AttnCase, backend: Backend, device: DeviceInfo, free_bytes: int | None,
                  settings: RunSettings | None = None) -> None:
    """Raise :class:`CaseSkipped` with the reason when the case cannot run here: the back end refuses
    it, it would not fit in (GPU or host) memory, or one call would take too long on this CPU."""
    why = refusal(backend, case, device)
    if why:
        raise CaseSkipped(why)
    where = "GPU" if device.is_cuda else "host"
    if free_bytes is not None:
        need = required_bytes(case, backend, device)
        if need > free_bytes:
            raise CaseSkipped(
                f"needs about {_gib(need)} of {where} memory ({case.describe()}) but {_gib(free_bytes)} is free;"
                " skipped before allocating"
            )
    rate = (settings.cpu_gflops or {}).get(case.dtype) if settings is not None and not device.is_cuda else None
    if rate and settings is not None:
        estimate_s = flops.flops(case) / (rate * CPU_ATTENTION_SHARE * 1e9)
        if estimate_s > settings.cpu_call_limit_s:
            raise CaseSkipped(
                f"one call is {flops.flops(case) / 1e9:,.1f} GFLOP: about {_duration(estimate_s)} on this CPU (a"
                f" {case.dtype} matmul runs at {rate:.0f} GFLOP/s here, attention at about {CPU_ATTENTION_SHARE:.0%} of"
                f" that), over the {settings.cpu_call_limit_s:g} s a call may take here; skipped before starting."
                " Run it on a GPU, or use --attn-profile=cpu (tiny shapes)"
            )


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.1f} s"
    return f"{seconds / 60:.0f} min" if seconds < 7200 else f"{seconds / 3600:.1f} h"


# ---- the three ways to run a case ----------------------------------------------------------------
def run_case(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings, *, label: str = "",
             nvml: Nvml | None = None) -> Record:
    """Measure one case. ``label`` (the test id) names its NVTX ranges and trace and is the record's
    ``test``; ``nvml`` reads the SM clock and throttle reasons around each sample. Raises CaseSkipped
    or CaseFailed, with memory released."""
    reader = nvml or NoNvml("not given")
    return _guarded(case, backend, device, settings,
                    lambda free: _measure(case, backend, device, settings, free, label or case.id, reader))


def check_case(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings) -> None:
    """Check the case against the reference and run it once, timing nothing (``--benchmark-disable``)."""

    def once(free: int | None) -> None:
        _setup(case, backend, device, settings)[0]()

    _guarded(case, backend, device, settings, once)


def case_kernels(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings) -> list[KernelCall]:
    """Check the case and return the GPU kernels one warm call launches (nothing timed)."""

    def kernels(free: int | None) -> list[KernelCall]:
        if not device.is_cuda:
            raise CaseSkipped("kernel names need a CUDA device and the PyTorch profiler")
        step = _setup(case, backend, device, settings)[0]
        step()  # warm: lazy initialisation and autotuning stay out of the profile
        return profile_kernels(step)

    return _guarded(case, backend, device, settings, kernels)


def _guarded(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings,
             work: Callable[[int | None], T]) -> T:
    """``work(free_bytes)`` after the can-it-run checks; any failure becomes CaseSkipped or CaseFailed
    once the case's memory is released."""
    free = _make_room(case, backend, device, settings)
    skipped: str | None = None
    failed: str | None = None
    try:
        return work(free)
    except (CaseSkipped, Unsupported) as exc:
        skipped = str(exc)
    except CaseFailed as exc:
        failed = str(exc)
    except Exception as exc:
        failed = _describe_failure(case, exc)
    if skipped is not None:  # refused before much was made: the next case collects only if it is short
        raise CaseSkipped(skipped)
    # A failure's frames (holding the case's tensors, an out-of-memory maybe) are gone here: free them now.
    _release(device)
    raise CaseFailed(failed)


def _make_room(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings) -> int | None:
    """:func:`check_can_run` with the memory free now; on a GPU where the case would not fit, once more after
    a garbage collection and emptying torch's cache (the previous case's cycles, blocks torch keeps). A full
    collection with torch loaded takes ~0.2 s: before every case it was a third of a warm smoke run on an
    H200 (30 s of 91 s under cProfile, 138 calls), so it runs only when memory is short -- not for a case its
    back end refuses (56 of them in the smoke run). Returns the free bytes the case may use."""
    if not device.is_cuda:
        host = host_free_bytes()
        free = int(host * settings.memory_headroom) if host is not None else None
        check_can_run(case, backend, device, free, settings)
        return free
    why = refusal(backend, case, device)
    if why:  # refused: no memory question to ask
        raise CaseSkipped(why)
    free = int(gpu_free_bytes() * settings.memory_headroom)
    if required_bytes(case, backend, device) > free:
        _release(device)
        free = int(gpu_free_bytes() * settings.memory_headroom)
    check_can_run(case, backend, device, free, settings)
    return free


def gpu_free_bytes() -> int:
    """Free memory on the current CUDA device, as the driver counts it."""
    import torch

    return int(torch.cuda.mem_get_info()[0])


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


# ---- measuring -----------------------------------------------------------------------------------
def _setup(case: AttnCase, backend: Backend, device: DeviceInfo,
           settings: RunSettings) -> tuple[Callable[[], Any], Check | None]:
    """The first input set's step, after the checks of one call: every output and gradient element
    finite, sampled rows of every sequence against the reference (output, and gradients for fwd+bwd)."""
    import torch

    first = make_inputs(case, backend.layout, torch_device(device), requires_grad=case.direction == "fwd+bwd",
                        seed=0)
    forward = backend.prepare(case, first)  # may raise Unsupported with the library's words
    def call() -> tuple[Any, tuple[Any, ...] | None, float]:
        t0 = time.perf_counter()
        with torch.set_grad_enabled(case.direction == "fwd+bwd"):
            out = forward()
            grads = tuple(torch.autograd.grad(out, (first.q, first.k, first.v), first.grad_out)) \
                if case.direction == "fwd+bwd" else None
        _sync(device)
        return out, grads, time.perf_counter() - t0

    out, grads, took = call()
    if not device.is_cuda and took > settings.cpu_call_limit_s:
        # the process's first call pays one-time costs (autograd's threads, torch's kernels loading): judge a second
        out, grads, took = call()
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
    return make_step(case, forward, first), check


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
        raise CaseFailed(problem.message(case))
    rows = check_rows(case, inputs, out, layout)
    if not rows.ok:
        raise CaseFailed(rows.message(case))
    summary = rows.summary()
    if grads is not None:
        grad = check_grad_rows(case, inputs, out, layout, grads)  # type: ignore[arg-type]
        if not grad.ok:
            raise CaseFailed(grad.message(case))
        summary = dataclasses.replace(summary, grad_rows=grad.rows_checked, grad_max_error=grad.max_error,
                                      grad_allowed=grad.allowed, grad_tensor=grad.tensor,
                                      grad_kv_heads=grad.kv_heads_checked)
    return dataclasses.replace(summary, seconds=time.perf_counter() - t0)


def _refuse_slow_cpu_call(case: AttnCase, step_s: float, settings: RunSettings) -> None:
    """A CPU case whose timed step takes longer than a call may here: measuring it would take some 20
    calls, and a call in torch's C++ cannot be interrupted."""
    if step_s > settings.cpu_call_limit_s:
        raise CaseSkipped(
            f"one call takes {step_s:.1f} s on this CPU, over the {settings.cpu_call_limit_s:g} s a call may take"
            " here (a measurement makes some 20 calls); skipped. Run it on a GPU, or use --attn-profile=cpu"
            " (tiny shapes)")


def _timer(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings, free: int | None,
           step: Callable[[], Any]) -> tuple[BuiltTimer, WarmupReport, L2Flush | None]:
    """Warm up with the call being timed, then the timer its length calls for."""
    flush = L2Flush(device.l2_bytes, torch_device(device)) if device.is_cuda else None
    report = warm_up(CpuTimer([step]).sample if flush is None else CudaEventTimer([step], flush).sample,
                     settings.warmup)

    def more_sets(have: int) -> list[Callable[[], Any]]:
        per_set = flops.min_bytes(case)
        sets = input_sets(per_set, device.l2_bytes)
        if free is not None and device.is_cuda:  # extra copies may use half of what the first one left free
            sets = max(1, min(sets, (free - required_bytes(case, backend, device)) // (2 * per_set)))
        out = []
        for seed in range(have, sets):
            extra = make_inputs(case, backend.layout, torch_device(device),
                                requires_grad=case.direction == "fwd+bwd", seed=seed)
            out.append(make_step(case, backend.prepare(case, extra), extra))
        return out

    kind = choose_timer(settings.timer, device.is_cuda, report.estimate_s)
    return build_timer(kind, [step], report.estimate_s, flush, more_sets), report, flush


def _measure(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings, free: int | None,
             label: str, nvml: Nvml) -> Record:
    started = time.perf_counter()
    step, check = _setup(case, backend, device, settings)
    setup_s = time.perf_counter() - started
    with nvtx_range(f"{label} warm-up", device.is_cuda):
        try:
            built, warmup, flush = _timer(case, backend, device, settings, free, step)
        except CaptureError as exc:
            raise CaseFailed(f"{case.id}: not timed: {exc}") from None
    prepare_s = time.perf_counter() - started
    with nvtx_range(f"{label} samples", device.is_cuda):
        sampling = sample_until(built.timer, settings.stop, read_sm_clock=nvml.sm_clock_mhz,
                                read_reasons=nvml.clocks_event_reasons)
    keep, throttle = assess(sampling.sample_reasons, sampling.sample_clocks, device.max_sm_clock_mhz,
                            drop=settings.drop_throttled)
    samples = [sampling.samples_s[i] for i in keep]
    clocks = [c for i in keep if (c := sampling.sample_clocks[i])]
    diagnostics = _diagnostics(step, device, settings, label)
    timing_check = None
    if settings.verify_timing and device.is_cuda:
        timing_check = TimingCheck(median(samples), profiled_kernel_time(built.timer, flush))
    work = flops.work(case)
    clocks_seen = Clocks.of(clocks, settings.clock_lock, throttle)
    replay = getattr(built.timer, "replay_s", [])
    return Record(
        test=label if label != case.id else "",
        case=case,
        device=device,
        timing=Timing(tuple(samples), median(samples), relative_precision(samples), sampling.stop_reason, built.kind,
                      built.note, built.timer.calls_per_sample, built.input_sets, warmup.calls, warmup.elapsed_s,
                      warmup.settled, prepare_s=prepare_s, elapsed_s=time.perf_counter() - started,
                      setup_s=setup_s, graph_replay_s=median(replay) if replay else None,
                      drift=relative_drift(samples), capture=built.capture,
                      l2=l2_condition(built.kind, built.input_sets, flops.min_bytes(case), device.l2_bytes)),
        work=work,
        figures=figures(work, median(samples), device.peak(case.dtype, settings.peak_tflops),
                        clocks_seen.sm_clock_mhz),
        clocks=clocks_seen,
        check=check,
        kernels=tuple(diagnostics["kernels"]),
        expression=_expression(backend, case),
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
