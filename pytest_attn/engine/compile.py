"""The compile phase: before the first sample of a run, every kernel module its cases need that a
library compiles on first use (FlashInfer: 30-100 s each) is found and built -- in parallel, a
progress line each -- so no case looks hung for a minute while ``nvcc`` runs, and compile time is
reported apart from measuring time. A module that fails to build makes the cases that need it skip
with the compiler's last lines.

1. Discover: each such back end (:class:`~pytest_attn.backends.base.CompilesOnFirstUse`) is asked about
   one small representative case per kind of call (back end, dtype, head dims, GQA ratio, mask form,
   direction) which module it needs first and has not built: lengths do not choose a module, so
   flag-mask cases shrink to a few hundred tokens; custom masks keep their lengths.
2. Build those modules in parallel.
3. Make each kind of call once: this loads what was built and compiles whatever a call needs beyond
   its first module (FlashInfer's custom masks: a bit-packing module), with a line for any that takes
   a while. Several workers of one host (``share``) split these calls: each makes its share, the kernels it
   compiles land in the libraries' disk caches for the others, and a case of a kind a worker did not call
   makes its first call in its own warm-up (a load from the cache, where another worker compiled it).
"""

from __future__ import annotations

import contextlib
import dataclasses
import gc
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import dataclass, field

from ..backends.base import Backend, CompilesOnFirstUse, JitModule
from ..core.case import AttnCase
from ..core.device import DeviceInfo
from ..core.masks import flag_form
from .inputs import make_inputs, torch_device

SLOW_FIRST_CALL_S = 5.0
FIRST_CALLS_AT_ONCE = 4
POLL_S = 1.0
SHRUNK_Q, SHRUNK_K, SHRUNK_SEQS = 64, 256, 4
LAST_LINES = 12


@dataclass(frozen=True)
class ModuleBuild:
    module: JitModule
    seconds: float
    error: str = ""  # the compiler's last lines, when it failed


@dataclass
class CompileReport:
    builds: list[ModuleBuild] = field(default_factory=list)
    wall_s: float = 0.0
    first_calls_s: float = 0.0  # of wall_s: one call of each kind, after the parallel builds
    more: list[str] = field(default_factory=list)  # modules those first calls compiled
    blocked: dict[str, str] = field(default_factory=dict)  # case id -> why it cannot run here
    first_calls: tuple[int, int] = (0, 0)  # kinds of call made here, of all kinds (fewer: a worker's share)

    def lines(self) -> list[str]:
        made, kinds = self.first_calls
        each = "of each kind" if made == kinds else f"of {made} of the {kinds} kinds (this worker's share)"
        more = f", compiling {len(set(self.more))} more" if self.more else ""
        if not self.builds:  # warm caches: the first calls still load kernels, part of the start-up
            return [f"compile: nothing to build; one call {each} before the first sample, {self.first_calls_s:.1f} s"
                    + more] if made else []
        failed = [b for b in self.builds if b.error]
        by_lib = sorted({b.module.library for b in self.builds})
        head = (f"compile: {len(self.builds)} {'/'.join(by_lib)} module(s) built in parallel before the first"
                f" sample in {self.wall_s:.1f} s")
        out = [head + (f"; {len(failed)} failed, their cases skipped" if failed else "")
               + f"; then one call {each}, {self.first_calls_s:.1f} s" + more]
        out += [f"  {b.module.name}: {'FAILED after' if b.error else 'built after'} {b.seconds:.1f} s"
                for b in self.builds]
        return out


def call_kind(case: AttnCase, backend: Backend) -> tuple[object, ...]:
    """What chooses a library's kernel module: not the lengths."""
    flags = flag_form(case)
    mask = "custom:" + case.mask.id if flags is None else ("window" if flags[0] >= 0 else str(flags))
    return (backend.name, case.dtype, case.head_dim_qk, case.head_dim_v, case.heads_q // case.heads_kv, mask,
            case.direction)


def representative(case: AttnCase) -> AttnCase:
    """A small case that needs the same modules: flag masks keep their form at a few hundred tokens."""
    if flag_form(case) is None:
        return case
    pairs = list(zip(case.seqlens_q, case.seqlens_k, strict=True))[:SHRUNK_SEQS]
    q = tuple(min(sq, SHRUNK_Q) for sq, _ in pairs)
    k = tuple(max(min(sk, SHRUNK_K), min(sq, SHRUNK_Q) if sk >= sq else 1) for sq, sk in pairs)
    return dataclasses.replace(case, seqlens_q=q, seqlens_k=k)


Group = list[tuple[AttnCase, Backend]]


def compile_phase(cases: Iterable[tuple[AttnCase, Backend]], device: DeviceInfo, say: Callable[[str], None],
                  share: tuple[int, int] | None = None) -> CompileReport:
    """Find and build every module the ``cases`` need that is not built yet; ``say`` prints progress. ``share``
    (index, count): one of ``count`` workers of a host, which makes the first calls of every ``count``-th kind
    from its ``index``."""
    report = CompileReport()
    if not device.is_cuda:
        return report
    kinds: dict[tuple[object, ...], Group] = {}
    for case, backend in cases:
        if isinstance(backend, CompilesOnFirstUse):
            kinds.setdefault(call_kind(case, backend), []).append((case, backend))
    if not kinds:
        return report
    started = time.perf_counter()
    needed = _discover(list(kinds.values()), device)
    if needed:
        failed = _build_all(needed, say, report)
        for module, (_, groups) in needed.items():
            if module in failed:
                for group in groups:
                    report.blocked.update((case.id, failed[module]) for case, _ in group)
    groups = [g for g in kinds.values() if not any(c.id in report.blocked for c, _ in g)]
    mine = groups if share is None else [g for i, g in enumerate(groups) if i % share[1] == share[0]]
    report.first_calls = (len(mine), len(groups))
    _first_calls(mine, device, say, report)
    report.wall_s = time.perf_counter() - started
    return report


def _first_calls(groups: Sequence[Group], device: DeviceInfo, say: Callable[[str], None],
                 report: CompileReport) -> None:
    """One call of each kind, JIT on, up to :data:`FIRST_CALLS_AT_ONCE` at a time: loads the built modules
    and compiles what they did not cover (FlashInfer's calls can need more modules than the first),
    naming what each compiled."""
    t0 = time.perf_counter()
    with ThreadPoolExecutor(max_workers=FIRST_CALLS_AT_ONCE, thread_name_prefix="pytest-attn-first-call") as pool:
        futures = {pool.submit(_timed_first_call, g[0][1], representative(g[0][0]), device): g for g in groups}
        for future in as_completed(futures):
            case, backend = futures[future][0]
            seconds, compiled = future.result()
            if compiled:
                report.more.extend(compiled)
                say(f"  first {backend.name} call compiled {', '.join(sorted(compiled))} in {seconds:.0f} s")
            elif seconds > SLOW_FIRST_CALL_S:
                say(f"  first {backend.name} call took {seconds:.0f} s ({case.id})")
    report.first_calls_s = time.perf_counter() - t0
    gc.collect()


def _timed_first_call(backend: Backend, case: AttnCase, device: DeviceInfo) -> tuple[float, list[str]]:
    """(seconds, the modules it compiled) of one call; refusals and errors are left to the case's own run."""
    before = _built(backend)
    started = time.perf_counter()
    with contextlib.suppress(Exception):
        _call_once(backend, case, device)
    return time.perf_counter() - started, sorted(_built(backend) - before)


def _built(backend: Backend) -> set[str]:
    try:
        return set(backend.built_modules())  # type: ignore[attr-defined]
    except Exception:
        return set()


def _call_once(backend: Backend, case: AttnCase, device: DeviceInfo) -> None:
    inputs = make_inputs(case, backend.layout, torch_device(device), seed=0)
    backend.prepare(case, inputs)


def _discover(groups: Sequence[Group], device: DeviceInfo) -> dict[JitModule, tuple[Backend, list[Group]]]:
    """Module -> (the back end that builds it, the groups of cases that need it), asking one small
    representative case per kind of call."""
    needed: dict[JitModule, tuple[Backend, list[Group]]] = {}
    for group in groups:
        case, backend = group[0]
        small = representative(case)
        try:
            modules = _ask(backend, small, device)
        except Exception:  # refused, or no room: the case's own run says why, in its words
            modules = []
        for module in modules:
            needed.setdefault(module, (backend, []))[1].append(group)
    gc.collect()  # once: a full collection with torch loaded takes ~0.2 s
    return needed


def _ask(backend: Backend, case: AttnCase, device: DeviceInfo) -> list[JitModule]:
    inputs = make_inputs(case, backend.layout, torch_device(device), seed=0)
    modules: list[JitModule] = backend.missing_modules(case, inputs)  # type: ignore[attr-defined]
    return modules


def _build_all(needed: dict[JitModule, tuple[Backend, list[Group]]], say: Callable[[str], None],
               report: CompileReport) -> dict[JitModule, str]:
    """Build the modules, library by library, each library's in one parallel build (a worker thread);
    a progress line as each module's library appears. Returns the failures."""
    by_library: dict[str, tuple[Backend, list[JitModule]]] = {}
    for module, (backend, _) in needed.items():
        by_library.setdefault(module.library, (backend, []))[1].append(module)
    failed: dict[JitModule, str] = {}
    for library, (backend, modules) in by_library.items():
        say(f"compiling {len(modules)} {library} module(s) in one parallel build before the first sample (first"
            f" use; cached in {modules[0].cache_dir}):")
        for m in modules:
            say(f"  compiling {m.name} ...")
        failed.update(_build_library(backend, modules, say, report))
    return failed


def _build_library(backend: Backend, modules: list[JitModule], say: Callable[[str], None],
                   report: CompileReport) -> dict[JitModule, str]:
    errors: list[str] = []

    def build() -> None:
        try:
            backend.build_modules(modules)  # type: ignore[attr-defined]
        except Exception as exc:
            errors.append("\n".join(str(exc).strip().splitlines()[-LAST_LINES:]) or type(exc).__name__)

    started = time.perf_counter()
    worker = threading.Thread(target=build, name="pytest-attn-compile", daemon=True)
    worker.start()
    pending = list(modules)
    while pending:
        alive = worker.is_alive()
        for m in [m for m in pending if backend.module_built(m)]:  # type: ignore[attr-defined]
            seconds = time.perf_counter() - started
            report.builds.append(ModuleBuild(m, seconds))
            say(f"  built {m.name} in {seconds:.0f} s")
            pending.remove(m)
        if not alive:
            break
        worker.join(POLL_S)
    if pending and len(modules) > 1:  # one build stops at its first failure: try the rest one by one
        say(f"  the build failed; building the {len(pending)} module(s) it left one at a time")
        return _one_by_one(backend, pending, say, report)
    failed = {}
    for m in pending:
        failed[m] = _failure(m, errors[0] if errors else "the build ended without this module",
                             time.perf_counter() - started, say, report)
    return failed


def _one_by_one(backend: Backend, modules: list[JitModule], say: Callable[[str], None],
                report: CompileReport) -> dict[JitModule, str]:
    failed = {}
    for m in modules:
        started = time.perf_counter()
        try:
            backend.build_modules([m])  # type: ignore[attr-defined]
        except Exception as exc:
            error = "\n".join(str(exc).strip().splitlines()[-LAST_LINES:]) or type(exc).__name__
            failed[m] = _failure(m, error, time.perf_counter() - started, say, report)
            continue
        report.builds.append(ModuleBuild(m, time.perf_counter() - started))
        say(f"  built {m.name} in {time.perf_counter() - started:.0f} s")
    return failed


def _failure(m: JitModule, error: str, seconds: float, say: Callable[[str], None], report: CompileReport) -> str:
    report.builds.append(ModuleBuild(m, seconds, error))
    say(f"  FAILED {m.name} after {seconds:.0f} s: {error.splitlines()[-1]}")
    return f"{m.library} could not compile {m.name}:\n{error}"
