"""The benchmark wiring: the session at configure, collection, the fixtures (``attn_bench``,
``attn_kernels``, ``attn_device``, ``attn_peak``), the hand-over of each result to pytest-benchmark,
and the end-of-session summary.

Hand-over: the per-call times become pytest-benchmark's own rounds through its public API
(``benchmark.pedantic`` with the ``timer`` option set to :func:`replay_clock`, a clock that advances by
exactly one measured sample per round), and the result record is written as the benchmark's
``extra_info`` -- here only (:meth:`~.results.Results.add`).
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from ..backends.base import CompilesOnFirstUse, refusal
from ..core.case import AttnCase
from ..core.device import DeviceInfo
from ..core.kernel_names import KernelCall, check_kernels
from ..core.peaks import Peak
from ..core.record import Record
from ..engine import clocks
from ..engine.compile import compile_phase
from ..engine.runner import CaseFailed, CaseSkipped, RunSettings, case_kernels, check_case, run_case
from ..verdicts.fingerprint import fingerprint_of
from ..verdicts.peers import peers_of
from .ab import ab_run, hand_over
from .benchjson import benchmark_metadata
from .detect import attention_file
from .figures import impossible_why, session_figures
from .gate import timer_pins
from .handover import RECORD, send
from .hints import skip_reason
from .options import AttnOptions, given
from .outcomes import refuse_case, skip_case
from .progress import Progress
from .session import (
    ATTENTION_RUN,
    ATTN_SESSION,
    CLOCK_LOCKER,
    CPU_THREADS,
    VISIBLE_GPUS,
    AttnSession,
    GateOptions,
    attn_session,
    case_of_item,
    options_of,
    prepare_attention_run,
    terminal_say,
    timing_disabled,
)
from .signals import guard_signals
from .summary import nothing_measured
from .workers import (
    _is_attention_suite,
    configure_controller,
    first_call_share,
    is_worker,
    record_name,
    workers_requested,
)


# ---- configure ------------------------------------------------------------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "attn: a pytest-attn benchmark case")
    config.addinivalue_line(
        "markers",
        "attn_kernels(must=(), must_not=()): the GPU kernels an attn_bench case launches must include a"
        " match for every regex in must and none for must_not (matched against the kernel's qualified"
        " name or its last :: part)",
    )
    if config.getoption("help", False):
        return
    session = AttnSession(config, AttnOptions.of(config), GateOptions.of(config))
    config.stash[ATTN_SESSION] = session
    why = _attention_run(config)
    if why:
        prepare_attention_run(config, why)
    # registration and every name option checked at start-up: in an attention run, or where a conftest or
    # plugin registers back ends (elsewhere nothing names one, and the registry is not built)
    if config.stash.get(ATTENTION_RUN, False) or config.hook.pytest_attn_register_backends.get_hookimpls():
        _ = session.backends
    if not is_worker(config) and (config.stash.get(ATTENTION_RUN, False) or _is_attention_suite(config)):
        configure_controller(config)
    _refuse_sustained(config)
    _lock_clocks(config, session)


def _refuse_sustained(config: pytest.Config) -> None:
    """``--attn-sustained`` where it cannot mean anything: no GPU (it measures one at its power cap), or an A/B."""
    options = options_of(config)
    if options.sustained_s is None and options.profile != "sustained":
        return
    if options.ab is not None:
        raise pytest.UsageError("--attn-sustained does not combine with --attn-ab: the arms take turns in short blocks,"
                                " never under sustained load. Run the A/B, and the sustained figures, separately")
    if not config.stash.get(VISIBLE_GPUS, []):
        raise pytest.UsageError("--attn-sustained (and --attn-profile=sustained) measures a GPU under sustained load --"
                                " its clock and power once they settle at the power cap, the energy per call from"
                                " NVML -- and no GPU is visible here (NVML found none). On a CPU, leave it out")


def _attention_run(config: pytest.Config) -> str:
    """Why this session is an attention run, or "" (see :mod:`.detect`)."""
    flags = given(config)
    if flags:
        return f"{flags[0]} was given"
    hooks = config.hook.pytest_attn_register_backends.get_hookimpls()
    if hooks:
        return f"{hooks[0].plugin_name.split('/')[-1]} registers back ends"
    patterns = config.getini("python_files") or ["test_*.py", "*_test.py"]
    found = attention_file([Path(a.split("::")[0]) for a in config.args], patterns)
    return f"{found} takes pytest-attn's fixtures" if found is not None else ""


def _lock_clocks(config: pytest.Config, session: AttnSession) -> None:
    request = session.options.lock_clocks
    if request.off:
        return

    def warn(message: str) -> None:
        config.issue_config_time_warning(pytest.PytestWarning(message), stacklevel=2)

    guard_signals(config)  # first: the clocks' guard restores them, then hands SIGTERM/SIGHUP to this one
    locker = clocks.ClockLocker(clocks.CONTROL_FACTORY(), request, warn)
    try:
        session.clock_lock = locker.acquire()
    except clocks.ClockLockError as exc:
        raise pytest.UsageError(f"--attn-lock-clocks={request.target}:require: {exc}") from None
    config.stash[CLOCK_LOCKER] = locker


def pytest_unconfigure(config: pytest.Config) -> None:
    """Restore locked clocks whatever ended the session (pytest unconfigures after failures and Ctrl-C)."""
    locker = config.stash.get(CLOCK_LOCKER, None)
    if locker is not None:
        locker.release()


def pytest_itemcollected(item: pytest.Item) -> None:
    """Each attention test's names, before -k deselects any: what a run that selected none says
    (:mod:`.nothing_selected`)."""
    attn = item.config.stash.get(ATTN_SESSION, None)
    if attn is not None and case_of_item(item) is not None:
        parents = tuple(node.name for node in item.listchain()[1:-1])  # not the session's, as pytest's -k
        attn.attention_tests.add((parents, getattr(item, "originalname", item.name)))


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test using ``attn_bench`` gets its times from our engine (the replay clock); benchmarks
    of one problem (a parametrized ``case``) share a pytest-benchmark group."""
    for item in items:
        if "attn_bench" not in getattr(item, "fixturenames", ()):
            continue
        case = case_of_item(item)
        group = {"group": case.group} if case is not None else {}
        item.add_marker(pytest.mark.benchmark(timer=replay_clock, **group), append=False)
        item.add_marker(pytest.mark.attn)


def pytest_collection_finish(session: pytest.Session) -> None:
    """Before the first sample: build every kernel module the selected cases need (FlashInfer's JIT),
    in parallel, a line per module; and count the cases for the progress lines."""
    attn = session.config.stash.get(ATTN_SESSION, None)
    if attn is None or session.config.option.collectonly:
        return
    cases = [c for c in map(case_of_item, session.items) if c is not None]
    if not cases:
        return
    attn.progress = Progress(total=len(cases))
    pairs = [(c, attn.registry.get(c.backend)) for c in cases]
    if not any(isinstance(b, CompilesOnFirstUse) for _, b in pairs) or not attn.has_gpu:
        return
    device = attn.device
    runnable = [(c, b) for c, b in pairs if refusal(b, c, device) is None]
    attn.compiled = compile_phase(runnable, device, terminal_say(session.config), first_call_share(session.config))


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session: pytest.Session) -> bool | None:
    """``--attn-compile-only``: the modules are built (above); measure nothing."""
    attn = session.config.stash.get(ATTN_SESSION, None)
    if attn is not None and attn.options.compile_only:
        built = len(attn.compiled.builds)
        terminal_say(session.config)(f"--attn-compile-only: {built} module(s) built; nothing measured")
        return True
    return None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Any:
    """A progress line (done/total, elapsed, estimate, the case now running) at most every 10 s."""
    attn = item.config.stash.get(ATTN_SESSION, None)
    attention = case_of_item(item) is not None
    progress = attn.progress if attn is not None and attention else None
    if progress is not None:
        line = progress.start(item.name)
        if line:
            terminal_say(item.config)(line)
    start = time.monotonic()
    yield
    if attn is not None:
        attn.wall.test_ran(start, time.monotonic(), attention)
    if progress is not None:
        progress.finish()


# ---- hand-over to pytest-benchmark ---------------------------------------------------------------
_now = [0.0]


def replay_clock() -> float:
    """pytest-benchmark's ``timer`` for pytest-attn cases: a clock that only moves when a measured
    sample is replayed into it, so each pedantic round lasts exactly one measured sample."""
    return _now[0]


def _advance(seconds: float) -> None:
    _now[0] += seconds


def feed_benchmark(benchmark: Any, samples_s: Sequence[float]) -> None:
    """Record ``samples_s`` as pytest-benchmark's rounds (public ``pedantic`` API only)."""
    it = iter(samples_s)
    _now[0] = 0.0  # keeps the clock small, so end - start is exact to ~1e-16 s
    benchmark.pedantic(lambda: _advance(next(it)), rounds=len(samples_s), iterations=1, warmup_rounds=0)


# ---- fixtures ------------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def attn_device(request: pytest.FixtureRequest) -> DeviceInfo:
    """The device this session measures on (probed once, on first use)."""
    return attn_session(request.config).device


@pytest.fixture(scope="session")
def attn_peak(request: pytest.FixtureRequest, attn_device: DeviceInfo) -> Callable[[str], Peak]:
    """``attn_peak(dtype)``: the datasheet and clock-aware peaks for a dtype on this device."""
    override = attn_session(request.config).options.peak_tflops
    return lambda dtype: attn_device.peak(dtype, override)


@pytest.fixture
def attn_bench(request: pytest.FixtureRequest, benchmark: Any, attn_device: DeviceInfo) -> Callable[[AttnCase],
                                                                                                  Record | None]:
    """``attn_bench(case)`` measures the case and records it in pytest-benchmark; skips with the
    back end's reason when it cannot run here. Returns the result record (None when
    ``--benchmark-disable`` asked for a check without timing)."""
    session = attn_session(request.config)
    config = request.config
    # under pytest-xdist pytest-benchmark disables itself in the workers: they still measure, and hand the
    # records to the controller; only a --benchmark-disable the user gave means "check, do not time"
    worker = is_worker(config)
    check_only = timing_disabled(config) if worker else benchmark.disabled
    ab = ab_run(config)
    given = {v.shape.name: v.shape.source.split(" ")[0] for v in session.options.adhoc}  # --attn-case, -workload

    def run(case: AttnCase) -> Record | None:
        backend = session.registry.get(case.backend)
        if blocked := session.compiled.blocked.get(case.id):
            skip_case(request, session, blocked)
        label, failed, used = record_name(request.node.nodeid, config), "", False
        try:
            if check_only:  # --benchmark-disable: checked and run once, nothing timed
                if ab is not None:  # by both arms
                    ab.check(session, case, label)
                elif worker:
                    check_case(case, backend, attn_device, session.settings)
                else:
                    used = True
                    benchmark.pedantic(check_case, (case, backend, attn_device, session.settings), rounds=1)
                return None
            settings = _settings_for(config, label)
            record, outcome = ab.measure(session, case, label) if ab is not None else \
                (run_case(case, backend, attn_device, settings, label=label, nvml=session.nvml), None)
        except CaseSkipped as exc:
            skip_case(request, session, skip_reason(exc, case, case.shape in given, session.profile,
                                                    given.get(case.shape, "")))
        except CaseFailed as exc:
            failed = str(exc)
        if not failed:
            record = session_figures(session, record)
            failed = impossible_why(session, record) or ""
        if failed:  # outside the except: pytest would print the message twice, "during handling of" the first
            refuse_case(request, benchmark, session, case.backend, failed, used)
        _hand_over(request, benchmark, session, record, worker)
        if ab is not None and outcome is not None:
            hand_over(ab, outcome, request, benchmark.extra_info, worker)
        _check_kernel_marker(request, record, attn_device)
        return record

    return run


def _settings_for(config: pytest.Config, label: str) -> RunSettings:
    """The session's settings, with the case's timer pinned where its baseline record names one."""
    settings = attn_session(config).settings
    pin = timer_pins(config).get(label)
    return dataclasses.replace(settings, pin=pin) if pin else settings


def _hand_over(request: pytest.FixtureRequest, benchmark: Any, session: AttnSession, record: Record,
               worker: bool) -> None:
    """A result into pytest-benchmark (one process), or into the test report for the controller (a
    pytest-xdist worker, where pytest-benchmark is off)."""
    if worker:
        benchmark.pedantic(lambda: None, rounds=1)  # the fixture counts as used: no warning
        session.results.take(record)
        send(request, RECORD, record.to_json())
        return
    feed_benchmark(benchmark, record.timing.samples_s)
    session.results.add(record, benchmark.extra_info)
    recorded = benchmark.stats.stats.median
    if abs(recorded - record.median_s) > 1e-6 * record.median_s:
        pytest.fail(
            f"pytest-benchmark recorded a median of {recorded:.6g} s but pytest-attn measured "
            f"{record.median_s:.6g} s: another benchmark(timer=...) marker or plugin overrides "
            "pytest-attn's replay clock on this test; remove it",
            pytrace=False,
        )



def _check_kernel_marker(request: pytest.FixtureRequest, record: Record, device: DeviceInfo) -> None:
    marker = request.node.get_closest_marker("attn_kernels")
    if marker is None or not device.is_cuda:
        return
    problem = check_kernels([k.name for k in record.kernels], marker.kwargs.get("must", ()),
                            marker.kwargs.get("must_not", ()))
    if problem:
        pytest.fail(f"{record.case.id}: {problem}", pytrace=False)


@pytest.fixture
def attn_kernels(request: pytest.FixtureRequest, attn_device: DeviceInfo) -> Callable[[AttnCase], list[KernelCall]]:
    """``attn_kernels(case)``: check the case against the reference, then return the GPU kernels
    one warm call launches (profiled, nothing timed); skips where the case cannot run."""
    session = attn_session(request.config)

    def run(case: AttnCase) -> list[KernelCall]:
        try:
            return case_kernels(case, session.registry.get(case.backend), attn_device, session.settings)
        except CaseSkipped as exc:
            pytest.skip(str(exc))
        except CaseFailed as exc:
            pytest.fail(str(exc), pytrace=False)

    return run


# ---- the end of the session ----------------------------------------------------------------------

def settle_records(session: pytest.Session) -> None:
    """Before pytest-benchmark saves (:mod:`.finish`): "measured nothing" where nothing was, each result against
    the others of its problem (known only once the whole group has run), and the controller's records handed to
    pytest-benchmark."""
    attn = session.config.stash.get(ATTN_SESSION, None)
    if attn is not None and not is_worker(session.config):
        nothing_measured(session, attn)
    if attn is not None:
        results = attn.results
        peers = peers_of(results.records, attn.options.speedup_vs)
        for record in list(results.records):
            results.update(dataclasses.replace(record, peers=peers.get(record.name)))
        bs = getattr(session.config, "_benchmarksession", None)
        if results.records and bs is not None and workers_requested(session.config):
            # the controller of pytest-xdist workers: their records become pytest-benchmark's results, so
            # its JSON, autosave, --benchmark-compare and --benchmark-compare-fail work as in one process
            bs.benchmarks.extend(benchmark_metadata(r) for r in results.records)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """Put the GPU in pytest-benchmark's machine_info (saved runs and --benchmark-compare see it), in an
    attention run only: pytest-benchmark asks at start-up too, when it loads runs to compare."""
    session = config.stash.get(ATTN_SESSION, None)
    if session is None or not session.active:
        return
    if workers_requested(config):  # the controller measures nothing: the GPUs are its workers'
        devices = list({r.device.uuid or r.device.name: r.device for r in session.results.records}.values())
        if devices:
            machine_info["attn_device"] = devices[0].as_machine_info()
            machine_info["attn_devices"] = [d.as_machine_info() for d in devices]
            if devices[0].is_cuda:
                machine_info["attn_fingerprint"] = fingerprint_of(devices[0], session.clock_lock,
                                                                  libraries=session.libraries).as_dict()
        return
    machine_info["attn_device"] = session.device.as_machine_info()
    machine_info["attn_cpu_threads"] = config.stash.get(CPU_THREADS, "torch's default")
    if session.device.is_cuda:
        machine_info["attn_fingerprint"] = fingerprint_of(session.device, session.clock_lock,
                                                          libraries=session.libraries).as_dict()
