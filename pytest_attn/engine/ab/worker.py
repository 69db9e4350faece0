"""One arm of a paired A/B run: a long-lived worker process that measures cases in blocks, when told.

The controller (:mod:`.processes`) starts two per arm, each in its arm's environment, and speaks JSON lines on
their stdin/stdout (anything else the libraries print goes to stderr, a log file): the typed requests and
answers of :mod:`.messages`, one answer line per request. ``prepare`` runs the case's setup, the check against
the reference (not in a second replica), the warm-up and the timer; ``block`` samples; ``hand_over`` and
``finish`` build the arm's record over both replicas' samples; ``release`` drops the case; ``prepare`` with
``replace`` sets the case up again while holding the old set-up (new places for its data), the samples kept. A
block's mean SM clock is read on the GPU (:mod:`.clockprobe`).

It ignores SIGINT, SIGTERM and SIGHUP (Ctrl-C, GNU ``timeout`` and a closed terminal signal the whole
process group: the controller finishes the run as after Ctrl-C and stops its arms) and ends at ``bye`` or
when its stdin closes (the controller is gone).
"""

from __future__ import annotations

import dataclasses
import gc
import importlib.metadata
import json
import math
import os
import signal
import sys
import time
from collections.abc import Callable, Iterable
from typing import IO, Any

import pytest_attn

from ...backends import QUIET_WARNINGS, assemble_registry
from ...backends.base import Registry, Unsupported
from ...core.codec import case_from_dict
from ...core.device import DeviceInfo
from ...core.record import TimerPin
from ..measure import Prepared, prepare, record_of
from ..nvml import Nvml
from ..probe import probe_device
from ..runner import describe_failure, make_room
from ..sampling import Sampling, take_samples
from ..settings import CaseFailed, CaseSkipped, RunSettings, required_bytes
from ..slowed import SlowedBackend
from ..stopping import WarmupRule
from .clockprobe import SmClockProbe, open_probe
from .messages import (
    NO_ROOM,
    PRELOAD_ENV,
    PROTOCOL,
    THREADS_ENV,
    Block,
    BlockAnswer,
    Finish,
    Finished,
    Handed,
    HandOver,
    Hello,
    HelloAnswer,
    Prepare,
    PrepareAnswer,
    Release,
    Released,
    Request,
    request_of,
    to_line,
)

#: An arm times every CUDA call by its kernels' time (kernel-sum; a plain run does so under 5 ms): the host's
#: share of a call can differ between two processes, which pairing cannot see (events made an A/A SLOWER:
#: docs/gpu-validation.md#the-paired-ab).
EVENTS_FROM_S = math.inf
#: A graph-timed arm rotates at least this many input sets, so its calls sit at several places in memory: one
#: placement per arm made an A/A SLOWER (docs/gpu-validation.md#the-paired-ab).
MIN_INPUT_SETS = 4
#: Listed by every arm beside the distributions its back ends measure (``Registry.distributions()``).
LIBRARIES = ("torch", "triton")
#: After a case this large the arm collects its garbage, so the other arm's process can have the memory.
COLLECT_ABOVE_BYTES = 256 * 2**20
#: A second replica's warm-up: its arm's first replica settled the case already (compiled kernels are on disk),
#: so two calls that agree will do (HunyuanVideo's fwd+bwd step takes 1.5 s a call).
SECOND_REPLICA_WARMUP = WarmupRule(min_calls=2)


def settings_to_json(settings: RunSettings) -> dict[str, Any]:
    """What an arm needs of the run's settings (sampling is the controller's; traces are not taken)."""
    return {"timer": settings.timer, "warmup": dataclasses.asdict(settings.warmup), "verify": settings.verify,
            "peak_tflops": settings.peak_tflops, "memory_headroom": settings.memory_headroom,
            "drop_throttled": settings.drop_throttled, "clock_lock": settings.clock_lock,
            "cpu_gflops": settings.cpu_gflops, "cpu_call_limit_s": settings.cpu_call_limit_s}


def settings_from_json(data: dict[str, Any]) -> RunSettings:
    known = {f.name for f in dataclasses.fields(RunSettings)}
    fields = {k: v for k, v in data.items() if k in known and k != "warmup"}
    return RunSettings(warmup=WarmupRule(**data.get("warmup", {})), **fields)


def libraries(registry: Registry | None = None) -> dict[str, tuple[str, str]]:
    """Each library under test this environment has -- torch, triton and the distribution of each back end of
    ``registry`` (by default the built-in ones and the entry points') -- with its version and the folder its
    install was found in (as ``import`` finds it: the first on ``sys.path``), so two arms that load one build
    can be told apart from two that load two builds of one version."""
    found = {}
    distributions = (registry if registry is not None else assemble_registry()).distributions()
    for name in dict.fromkeys([*LIBRARIES, *distributions]):
        try:
            dist = importlib.metadata.distribution(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        found[name] = (dist.version, os.path.normpath(str(dist.locate_file(""))))
    return found


class Arm:
    """The requests of one arm (see the module); the I/O is :func:`serve`'s."""

    def __init__(self, probe: Callable[[], tuple[DeviceInfo, Nvml]],
                 clock_probe: Callable[[int], tuple[SmClockProbe | None, str]] = open_probe) -> None:
        self._probe = probe
        self._open_clock = clock_probe
        self.clock: SmClockProbe | None = None
        self.registry: Registry | None = None
        self.settings = RunSettings()
        self.device: DeviceInfo | None = None
        self.nvml: Nvml | None = None
        self.ready: Prepared | None = None
        self.sampling = Sampling([], "", 0.0)  # the prepared case's samples, block after block

    def hello(self, request: Hello) -> HelloAnswer:
        registry = assemble_registry(files=request.backends_from)
        slowdown = request.slowdown
        self.registry = registry.wrapped(lambda b: SlowedBackend(b, slowdown)) if slowdown else registry
        self.settings = dataclasses.replace(settings_from_json(request.settings),
                                            events_from_s=EVENTS_FROM_S, min_input_sets=MIN_INPUT_SETS)
        self.device, self.nvml = self._probe()
        self.clock, clock = self._open_clock(self.device.sm_count or 0) if self.device.is_cuda else (None, "no GPU")
        found = libraries(registry)
        return HelloAnswer(PROTOCOL, clock, sys.executable, os.path.dirname(pytest_attn.__file__),
                           {k: version for k, (version, _) in found.items()},
                           {k: place for k, (_, place) in found.items()},
                           self.device.describe(), self.device.uuid, os.getpid(),
                           os.environ.get("CUDA_VISIBLE_DEVICES"))

    def prepare(self, request: Prepare) -> PrepareAnswer:
        assert self.registry is not None and self.device is not None, "hello first"
        if request.replace and self.ready is not None:
            return self._replace(request)
        self.release(Release())
        case = case_from_dict(request.case)
        backend = self.registry.get(case.backend)
        settings = dataclasses.replace(self.settings, pin=TimerPin(**request.pin) if request.pin else None)
        if not request.check:  # a second replica: the first of its arm passed the check
            settings = dataclasses.replace(settings, verify=False, warmup=SECOND_REPLICA_WARMUP)
        try:
            free = make_room(case, backend, self.device, settings)
            self.ready = prepare(case, backend, self.device, settings, free, request.label or case.id)
        except (CaseSkipped, Unsupported) as exc:
            return PrepareAnswer(skip=str(exc))
        except CaseFailed as exc:
            return self._failed(str(exc))
        except Exception as exc:
            return self._failed(describe_failure(case, exc))
        check = self.ready.check
        return _ready(self.ready, f"{check.rows} rows, max error {check.max_error:.3g} of {check.allowed:.3g}"
                      " allowed" if check is not None else "not checked (--attn-no-verify)")

    def _replace(self, request: Prepare) -> PrepareAnswer:
        """The case set up again, unchecked and pinned, while the old set-up is held -- so the new one's data
        sit elsewhere in memory -- then the old one dropped; the samples so far kept. Where both do not fit, a
        skip, and the old set-up still held: the pairs go on there (freeing its own first to try again failed a
        case on an H100: docs/gpu-validation.md#the-paired-ab)."""
        assert self.ready is not None and self.device is not None
        old, kept = self.ready, self.sampling
        settings = dataclasses.replace(self.settings, pin=TimerPin(**request.pin) if request.pin else None,
                                       verify=False, warmup=SECOND_REPLICA_WARMUP)
        try:
            free = make_room(old.case, old.backend, self.device, settings)
        except CaseSkipped as exc:
            return PrepareAnswer(skip=f"{NO_ROOM} beside the set-up held: {exc}")
        try:
            ready = prepare(old.case, old.backend, self.device, settings, free, request.label or old.case.id)
        except (CaseSkipped, Unsupported, CaseFailed) as exc:
            return self._failed(str(exc))
        except Exception as exc:
            return self._failed(describe_failure(old.case, exc))
        del old
        self.release(Release())  # the old set-up (where it is still held) and its memory, back to the driver
        self.ready, self.sampling = ready, kept
        return _ready(ready, "")

    def _failed(self, message: str) -> PrepareAnswer:
        """A failed case's frames (its tensors, an out-of-memory maybe) are freed before the answer."""
        self.release(Release())
        gc.collect()
        return PrepareAnswer(fail=message)

    def block(self, request: Block) -> BlockAnswer:
        assert self.ready is not None and self.nvml is not None, "prepare first"
        timer, nvml, kept = self.ready.built.timer, self.nvml, self.sampling
        if request.warm:  # the first call after the other arm ran (caches and clocks are the other's), untraced
            getattr(timer, "inner", timer).sample()
        start = self.clock.mark() if self.clock is not None else None
        first, t0 = len(kept.samples_s), time.perf_counter()
        take_samples(timer, kept, int(request.samples), nvml.sm_clock_mhz, nvml.clocks_event_reasons)
        wall = time.perf_counter() - t0
        kept.elapsed_s += wall
        mean = self.clock.mean_mhz(start, self.clock.mark()) if self.clock is not None else None
        return BlockAnswer(kept.samples_s[first:], kept.sample_clocks[first:], wall, mean)

    def hand_over(self, request: HandOver) -> Handed:
        """A second replica's samples, for its arm's record (:meth:`finish` of the first); the case released."""
        kept = self.sampling
        self.release(Release())
        return Handed(kept.samples_s, kept.sample_clocks, kept.sample_reasons, kept.elapsed_s)

    def finish(self, request: Finish) -> Finished:
        assert self.ready is not None, "prepare first"
        self.sampling.stop_reason = request.stop
        for other in request.more:  # the arm's other replica's samples
            self.sampling.samples_s += other.samples_s
            self.sampling.sample_clocks += other.clocks
            self.sampling.sample_reasons += other.reasons
            self.sampling.elapsed_s += other.elapsed_s
        record = record_of(self.ready, self.sampling, diagnose=request.diagnose)
        self.release(Release())
        return Finished(record.to_json())

    def release(self, request: Release) -> Released:
        ready, self.ready, self.sampling = self.ready, None, Sampling([], "", 0.0)
        if ready is not None and required_bytes(ready.case, ready.backend, ready.device) > COLLECT_ABOVE_BYTES:
            del ready
            gc.collect()
        if self.device is not None and self.device.is_cuda:
            import torch

            torch.cuda.empty_cache()  # what this process freed, the other arm's may use
        return Released()


def _ready(ready: Prepared, check: str) -> PrepareAnswer:
    """The answer to a prepare that set the case up: how it is timed, and what its check said."""
    built = ready.built
    return PrepareAnswer(ok=True, timer=built.kind, input_sets=built.input_sets,
                         calls_per_sample=built.timer.calls_per_sample, estimate_s=ready.warmup.estimate_s,
                         plan=getattr(ready.backend, "last_plan", ""), check=check)


def serve(lines: Iterable[str], out: IO[str], arm: Arm) -> None:
    """Answer each request line with one line, until ``bye`` or the end of the input."""
    for line in lines:
        request: Request | None = None
        try:
            request = request_of(line)
            if request is None:
                return
            text = to_line(answer(arm, request))
        except Exception as exc:  # the arm stays up; the controller fails the case with this
            text = json.dumps({"error": f"{type(exc).__name__}: {exc}", "op": getattr(request, "op", None)})
        out.write(text + "\n")
        out.flush()


def answer(arm: Arm, request: Request) -> Any:
    """The arm's answer to one request (its method of the request's name)."""
    handler: Callable[[Any], Any] = getattr(arm, request.op)
    return handler(request)


def preload(names: str) -> list[str]:
    """Import torch and the libraries of the back ends ``names`` (comma-separated) names, nothing on the GPU:
    the arms' processes start together and do this at once, before the first request. Returns what could not
    be imported (said again, with its reason, when a case asks for it)."""
    missing: list[str] = []
    try:
        import torch  # noqa: F401
    except Exception:
        return ["torch"]
    wanted = [n for n in names.split(",") if n]
    if not wanted:
        return missing
    registry = assemble_registry()
    for name in wanted:
        try:
            if registry.get(name).available() is not None:
                missing.append(name)
        except Exception:  # a conftest back end, known after hello; a library that fails to import
            missing.append(name)
    return missing


def take_cpu_threads(given: str) -> int | None:
    """torch's CPU thread count as the controller's (``given``: only a run without a GPU gives one); returns the count
    set, or None where none was given."""
    if not given.isdigit() or int(given) < 1:
        return None
    import torch

    torch.set_num_threads(int(given))
    return torch.get_num_threads()


def main() -> int:
    for name in ("SIGINT", "SIGTERM", "SIGHUP"):  # sent to the process group: the controller stops its arms
        if hasattr(signal, name):
            signal.signal(getattr(signal, name), signal.SIG_IGN)
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)  # whatever a library prints goes to the log, not into the answers
    for quiet in QUIET_WARNINGS:
        quiet.install()
    preload(os.environ.get(PRELOAD_ENV, ""))
    take_cpu_threads(os.environ.get(THREADS_ENV, ""))
    serve(sys.stdin, out, Arm(probe_device))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
