"""Runs one case end to end: can it run here, then :mod:`.measure` (inputs, correctness check, warm-up,
timer choice, sampling, figures) -- and returns its :class:`~pytest_attn.core.record.Record`.

pytest-free: it raises :class:`CaseSkipped` or :class:`CaseFailed`, the plugin turns those into pytest
outcomes. Memory is released before either is raised, so the session goes on.
"""

from __future__ import annotations

import gc
import traceback
from collections.abc import Callable
from typing import TypeVar

from ..backends.base import Backend, Unsupported, refusal
from ..core import flops
from ..core.case import AttnCase
from ..core.device import DeviceInfo
from ..core.kernel_names import KernelCall
from ..core.record import Record
from .measure import _setup, measure
from .nvml import NoNvml, Nvml
from .probe import host_free_bytes
from .profiler import profile_kernels
from .settings import (
    CPU_ATTENTION_SHARE,
    CPU_CALL_LIMIT_S,
    CaseFailed,
    CaseSkipped,
    RunSettings,
    TooLongHere,
    WrongOutput,
    required_bytes,
)

__all__ = ["CPU_ATTENTION_SHARE", "CPU_CALL_LIMIT_S", "CaseFailed", "CaseSkipped", "RunSettings", "TooLongHere",
           "case_kernels", "check_can_run", "check_case", "required_bytes", "run_case"]

T = TypeVar("T")


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
            gflop = flops.flops(case) / 1e9
            raise TooLongHere(
                f"one call is {gflop:,.1f} GFLOP: about {_duration(estimate_s)} on this CPU (a {case.dtype} matmul"
                f" runs at {rate:.0f} GFLOP/s here, attention at about {CPU_ATTENTION_SHARE:.0%} of that), over the"
                f" {settings.cpu_call_limit_s:g} s a call may take here; skipped before starting.",
                gflop, gflop * settings.cpu_call_limit_s / estimate_s)


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
                    lambda free: measure(case, backend, device, settings, free, label or case.id, reader))


def check_case(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings) -> None:
    """Check the case against the reference and run it once, timing nothing (``--benchmark-disable``)."""

    def once(free: int | None) -> None:
        _setup(case, backend, device, settings).step()

    _guarded(case, backend, device, settings, once)


def case_kernels(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings) -> list[KernelCall]:
    """Check the case and return the GPU kernels one warm call launches (nothing timed)."""

    def kernels(free: int | None) -> list[KernelCall]:
        if not device.is_cuda:
            raise CaseSkipped("kernel names need a CUDA device and the PyTorch profiler")
        step = _setup(case, backend, device, settings).step
        step()  # warm: lazy initialisation and autotuning stay out of the profile
        return profile_kernels(step)

    return _guarded(case, backend, device, settings, kernels)


def _guarded(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings,
             work: Callable[[int | None], T]) -> T:
    """``work(free_bytes)`` after the can-it-run checks; any failure becomes CaseSkipped or CaseFailed
    once the case's memory is released."""
    free = make_room(case, backend, device, settings)
    skipped: CaseSkipped | None = None
    failed: str | None = None
    try:
        return work(free)
    except (CaseSkipped, Unsupported) as exc:  # a fresh one: the caught one's frames hold the case's tensors
        skipped = TooLongHere(exc.what, exc.gflop, exc.fits_gflop) if isinstance(exc, TooLongHere) else \
            CaseSkipped(str(exc))
    except WrongOutput as exc:
        known = known_wrong(backend, case)
        failed = str(exc)
        skipped = CaseSkipped(f"{known}. Measured here: {failed}") if known else None
    except CaseFailed as exc:
        failed = str(exc)
    except Exception as exc:
        failed = describe_failure(case, exc)
    if skipped is not None:  # refused before much was made: the next case collects only if it is short
        raise skipped
    # A failure's frames (holding the case's tensors, an out-of-memory maybe) are gone here: free them now.
    _release(device)
    raise CaseFailed(failed)


def known_wrong(backend: Backend, case: AttnCase) -> str:
    """The library bug that makes ``backend`` wrong on ``case``, where its adapter names one (``known_wrong``), else
    "": a wrong output there is that bug, reported as a skip that says so -- once the library is fixed the check
    passes and the case is measured."""
    known = getattr(backend, "known_wrong", None)
    return (known(case) or "") if callable(known) else ""


def make_room(case: AttnCase, backend: Backend, device: DeviceInfo, settings: RunSettings) -> int | None:
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


def describe_failure(case: AttnCase, exc: Exception) -> str:
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
