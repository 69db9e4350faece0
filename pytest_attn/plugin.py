"""pytest hooks and fixtures of pytest-attn. Wiring only: the logic lives in the modules it calls.

Loaded through the ``pytest11`` entry point. Nothing here imports torch at import time or touches
CUDA during collection beyond ``torch.cuda.is_available()`` to pick the ``auto`` profile; the
device is probed when a test first needs it, or when pytest-benchmark asks for ``machine_info``.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from . import options as opt
from .backends import Registry, RegistryError, builtin_registry
from .case import AttnCase
from .catalog import profile_variants
from .ceilings import CeilingCache, fractions
from .dispatch import KernelCall, check_kernels
from .relative import relative_to_fastest
from .runner import CaseFailed, CaseResult, CaseSkipped, RunSettings, case_kernels, run_case
from .stopping import WarmupRule
from .summary import render
from .timing import feed_benchmark, replay_clock

if TYPE_CHECKING:
    from .device import DeviceInfo
    from .peaks import Peak


class AttnSession:
    """State of one pytest session: resolved options, back ends, device, results."""

    def __init__(self, options: opt.AttnOptions, registry: Registry, backends: tuple[str, ...]) -> None:
        self.options = options
        self.registry = registry
        self.backends = backends
        self.results: list[CaseResult] = []
        self.extra_infos: dict[str, dict[str, Any]] = {}  # by case id: the benchmark's extra_info
        self.skips: list[str] = []
        self.clock_lock = "not locked"
        self.ceilings = CeilingCache()
        self.notes: list[str] = []  # session-level lines for the summary (HBM traffic, ...)
        self._device: DeviceInfo | None = None

    @cached_property
    def profile(self) -> str:
        if self.options.profile != "auto":
            return self.options.profile
        import torch

        return "default" if torch.cuda.is_available() else "cpu"

    @property
    def device(self) -> DeviceInfo:
        if self._device is None:
            from .device import probe_device

            self._device = probe_device()
        return self._device

    @property
    def device_if_probed(self) -> DeviceInfo | None:
        return self._device

    @cached_property
    def settings(self) -> RunSettings:
        return RunSettings(
            timer=self.options.timer,
            stop=self.options.stop_rule(self.profile),
            warmup=WarmupRule(max_time_s=2.0 if self.profile == "cpu" else 10.0),
            verify=self.options.verify,
            peak_tflops=self.options.peak_tflops,
            drop_throttled=self.options.drop_throttled,
            verify_timing=self.options.verify_timing,
            trace_dir=Path(self.options.trace_dir) if self.options.trace_dir else None,
            clock_lock=self.clock_lock,
        )

    def backends_for(self, kind: str) -> list[str]:
        """The selected back ends that take part in a suite kind (some, such as the mask suite's
        forced-custom-mask expressions or the decode-only KV-cache calls, declare ``only_suites``)."""
        names = []
        for name in self.backends:
            only = getattr(self.registry.get(name), "only_suites", ())
            if not only or kind in only or kind == "all":
                names.append(name)
        return names

    def cases(self, kind: str = "prefill") -> list[AttnCase]:
        """The profile's cases of one kind ("prefill", "decode", "varlen", "masks" or "all") for the
        selected back ends, dtypes and directions, back ends innermost so one problem's results sit
        together."""
        only_adhoc = self.options.adhoc and self.options.profile == "auto"
        variants = [] if only_adhoc else profile_variants(self.profile, kind)
        variants += [v for v in self.options.adhoc if v.shape.kind == kind or kind == "all"]
        if self.options.dtypes:
            variants = [v for v in variants if v.dtype in self.options.dtypes]
        if self.options.directions:
            variants = [v for v in variants if v.direction in self.options.directions]
        backends = self.backends_for(kind)
        return [v.case(b) for v in variants for b in backends]


# baselines, the regression gate and reports; the fuzz suite's wiring
pytest_plugins = ["pytest_attn.gating", "pytest_attn.fuzz_plugin"]

ATTN_SESSION = pytest.StashKey[AttnSession]()
CLOCK_LOCKER = pytest.StashKey[Any]()


def fuzz_targets(config: pytest.Config) -> list[tuple[str, str]]:
    """(back end, direction) pairs for a fuzz suite's ``pytest_generate_tests`` (see
    :mod:`pytest_attn.fuzz_plugin`)."""
    from .fuzz_plugin import fuzz_targets as targets

    return targets(config)


def attn_session(config: pytest.Config) -> AttnSession:
    return config.stash[ATTN_SESSION]


def attn_cases(config: pytest.Config, kind: str = "prefill") -> list[AttnCase]:
    """Cases for a suite's ``pytest_generate_tests``; see suites/test_prefill.py."""
    return attn_session(config).cases(kind)


# ---- options ---------------------------------------------------------------------------------
def pytest_addhooks(pluginmanager: pytest.PytestPluginManager) -> None:
    from . import hookspecs

    pluginmanager.add_hookspecs(hookspecs)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attn", "pytest-attn: GPU attention benchmarks")
    group.addoption("--attn-profile", type=opt.profile, default="auto", metavar="NAME",
                    help="case set: smoke (about a minute on one GPU), default, full, cpu (tiny shapes, no GPU);"
                         " auto = default on a GPU, cpu without (default: auto)")
    group.addoption("--attn-backends", type=opt.names_list, default=("default",), metavar="LIST",
                    help="comma-separated back ends, or 'default' / 'all' (default: default = every built-in"
                         " but the slow upcast reference)")
    group.addoption("--attn-dtypes", type=opt.dtypes, default=None, metavar="LIST",
                    help="keep only these dtypes of the profile: fp16,bf16,fp32,fp8")
    group.addoption("--attn-directions", type=opt.directions, default=None, metavar="LIST",
                    help="keep only these directions: fwd, fwd+bwd")
    group.addoption("--attn-peak-tflops", type=opt.positive_float("--attn-peak-tflops"), default=None,
                    metavar="TFLOPS", help="dense peak TFLOP/s to compute MFU against (for GPUs not in the peak table)")
    group.addoption("--attn-timer", type=opt.timer, default="auto", metavar="KIND",
                    help="auto (CUDA graph for calls < 5 ms, CUDA events otherwise), cuda-event, cuda-graph, cpu")
    group.addoption("--attn-precision", type=opt.precision, default=0.01, metavar="FRACTION",
                    help="stop sampling when the median's 95%% CI half-width is below this (default 0.01 = 1%%)")
    group.addoption("--attn-max-time", type=opt.positive_float("--attn-max-time"), default=None, metavar="SECONDS",
                    help="cap on sampling time per case (default by profile: smoke 2, default 3, full 5, cpu 0.5)")
    group.addoption("--attn-min-samples", type=opt.min_samples, default=10, metavar="N",
                    help="samples to take at least (default 10)")
    group.addoption("--attn-case", type=opt.adhoc_case, action="append", default=[], metavar="SPEC",
                    help="an ad-hoc problem, e.g. \"batch=4,seqlen=2048,heads=16,head_dim=128,causal,dtype=bf16\""
                         " (repeatable); without --attn-profile only these run, with it they run beside the catalog")
    group.addoption("--attn-speedup-vs", default="sdpa-math", metavar="BACKEND",
                    help="the back end every result's speedup is measured against on the same problem (default:"
                         " sdpa-math, the naive one)")
    group.addoption("--attn-trace-dir", default=None, metavar="DIR",
                    help="write one PyTorch-profiler Chrome trace per case (3 calls, after sampling) into DIR")
    group.addoption("--attn-lock-clocks", type=opt.lock_clocks, default="off", metavar="off|base|max|MHZ[:require]",
                    help="lock the SM clock for the session through NVML (needs root) and restore it at the end;"
                         " :require stops at start-up if it cannot, :try (default) warns and records 'not locked'")
    group.addoption("--attn-verify-timing", action="store_true", default=False,
                    help="one extra profiled run per case: flag it when the profiler's kernel time and the reported"
                         " median differ by more than 5%%")
    group.addoption("--attn-hbm", default=None, metavar="REGEX",
                    help="re-run the cases whose id matches REGEX under Nsight Compute (ncu) and report HBM bytes read"
                         " and written against the minimal bytes (IO amplification)")
    group.addoption("--attn-drop-throttled", action="store_true", default=False,
                    help="drop samples taken under 75%% of the nominal SM clock (nvbench's rule); count reported")
    group.addoption("--attn-inject-slowdown", type=opt.fraction("--attn-inject-slowdown"), default=None,
                    metavar="PCT", help="make every back end this much slower on purpose (a GPU busy-wait after each"
                                        " call): shows that the regression gate turns red")
    group.addoption("--attn-no-verify", action="store_true", default=False,
                    help="skip the check of sampled output rows against the fp64 reference before timing")


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "attn: a pytest-attn benchmark case")
    config.addinivalue_line(
        "markers",
        "attn_kernels(must=(), must_not=()): the GPU kernels an attn_bench case launches must include a"
        " match for every regex in must and none for must_not (matched against the kernel's qualified"
        " name or its last :: part)",
    )
    options = opt.AttnOptions(
        profile=config.getoption("attn_profile"),
        backends=config.getoption("attn_backends"),
        dtypes=config.getoption("attn_dtypes"),
        directions=config.getoption("attn_directions"),
        peak_tflops=config.getoption("attn_peak_tflops"),
        timer=config.getoption("attn_timer"),
        precision=config.getoption("attn_precision"),
        max_time_s=config.getoption("attn_max_time"),
        min_samples=config.getoption("attn_min_samples"),
        verify=not config.getoption("attn_no_verify"),
        drop_throttled=config.getoption("attn_drop_throttled"),
        verify_timing=config.getoption("attn_verify_timing"),
        adhoc=tuple(config.getoption("attn_case")),
        trace_dir=config.getoption("attn_trace_dir"),
    )
    registry = builtin_registry()
    try:
        from .registration import register_entry_points

        register_entry_points(registry)
        config.hook.pytest_attn_register_backends(registry=registry, config=config)
    except RegistryError as exc:
        raise pytest.UsageError(f"registering back ends: {exc}") from None
    slowdown = config.getoption("attn_inject_slowdown")
    if slowdown:
        from .backends.slowed import SlowedBackend

        registry = Registry([SlowedBackend(b, slowdown) for b in registry])
    try:
        backends = options.resolve_backends(registry.names(), registry.default_names())
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    reference = config.getoption("attn_speedup_vs")
    if reference not in registry.names():
        known = ", ".join(registry.names())
        raise pytest.UsageError(f"--attn-speedup-vs={reference!r} is not a back end; known: {known}")
    session = AttnSession(options, registry, backends)
    config.stash[ATTN_SESSION] = session
    _lock_clocks(config, session)


def _lock_clocks(config: pytest.Config, session: AttnSession) -> None:
    from . import clocks

    request = config.getoption("attn_lock_clocks")  # argparse converts the default too
    if request.off:
        return

    def warn(message: str) -> None:
        config.issue_config_time_warning(pytest.PytestWarning(message), stacklevel=2)

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


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Every test using ``attn_bench`` gets its times from our engine (the replay clock); benchmarks
    of one problem (a parametrized ``case``) share a pytest-benchmark group."""
    for item in items:
        if "attn_bench" not in getattr(item, "fixturenames", ()):
            continue
        case = getattr(item, "callspec", None) and item.callspec.params.get("case")  # type: ignore[attr-defined]
        group = {"group": case.group} if isinstance(case, AttnCase) else {}
        item.add_marker(pytest.mark.benchmark(timer=replay_clock, **group), append=False)
        item.add_marker(pytest.mark.attn)


# ---- fixtures --------------------------------------------------------------------------------
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
def attn_bench(
    request: pytest.FixtureRequest, benchmark: Any, attn_device: DeviceInfo
) -> Callable[[AttnCase], CaseResult | None]:
    """``attn_bench(case)`` measures the case and records it in pytest-benchmark; skips with the
    back end's reason when it cannot run here."""
    session = attn_session(request.config)

    def run(case: AttnCase) -> CaseResult | None:
        backend = session.registry.get(case.backend)
        measure = not benchmark.disabled
        try:
            result = run_case(case, backend, attn_device, session.settings, measure=measure,
                              label=request.node.nodeid)
        except CaseSkipped as exc:
            session.skips.append(str(exc))
            pytest.skip(str(exc))
        except CaseFailed as exc:
            pytest.fail(str(exc), pytrace=False)
        if result is None:  # --benchmark-disable: checked and ran once, nothing timed
            return None
        feed_benchmark(benchmark, result.samples_s)
        benchmark.extra_info.update(result.extra_info())
        hbm = request.config.getoption("attn_hbm")
        if hbm and attn_device.is_cuda and re.search(hbm, case.id):
            _measure_hbm(session, benchmark, result)
        ceilings = session.ceilings.get(attn_device, case.dtype)
        benchmark.extra_info.update(fractions(result.figures.tflops, result.figures.tbps, case.dtype, ceilings))
        session.extra_infos[case.id] = benchmark.extra_info
        recorded = benchmark.stats.stats.median
        if abs(recorded - result.median_s) > 1e-6 * result.median_s:
            pytest.fail(
                f"pytest-benchmark recorded a median of {recorded:.6g} s but pytest-attn measured "
                f"{result.median_s:.6g} s: another benchmark(timer=...) marker or plugin overrides "
                "pytest-attn's replay clock on this test; remove it",
                pytrace=False,
            )
        session.results.append(result)
        marker = request.node.get_closest_marker("attn_kernels")
        if marker is not None and attn_device.is_cuda:
            problem = check_kernels([k.name for k in result.kernels], marker.kwargs.get("must", ()),
                                    marker.kwargs.get("must_not", ()))
            if problem:
                pytest.fail(f"{case.id}: {problem}", pytrace=False)
        return result

    return run


def _measure_hbm(session: AttnSession, benchmark: Any, result: CaseResult) -> None:
    from .fuzz import case_from_json, case_json
    from .hbm import measure

    try:
        text = case_json(result.case, 0)
        case_from_json(text)  # the subprocess must be able to rebuild the case (its mask from its id)
        traffic = measure(text, result.work.min_bytes)
    except ValueError as exc:  # a mask that cannot be named for the subprocess
        traffic = f"cannot hand the case to ncu: {exc}"
    if isinstance(traffic, str):
        benchmark.extra_info["hbm_skipped"] = traffic
        session.notes.append(f"{result.case.id}: HBM not measured: {traffic}")
    else:
        benchmark.extra_info.update(traffic.as_extra_info())
        session.notes.append(f"{result.case.id}: {traffic.describe()}")


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


# ---- reporting -------------------------------------------------------------------------------
@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session) -> Any:
    """Before pytest-benchmark saves (its own wrapper saves before yielding, so this one must wrap
    it): each result's time relative to the fastest back end on the same problem goes into its
    extra_info, known only once the whole group has run."""
    attn = session.config.stash.get(ATTN_SESSION, None)
    if attn is not None:
        for case_id, rel in relative_to_fastest(attn.results, session.config.getoption("attn_speedup_vs")).items():
            info = attn.extra_infos.get(case_id)
            if info is not None:
                info.update(rel.as_extra_info())
    yield


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    session = config.stash.get(ATTN_SESSION, None)
    if session is None or not (session.results or session.skips):
        return
    terminalreporter.write_sep("=", "pytest-attn summary")
    device = session.device_if_probed
    lines = render(session.results, device, session.skips, config.getoption("attn_speedup_vs"),
                   session.ceilings.measured(device))
    lines.insert(0, f"profile: {session.profile}; back ends: {', '.join(session.backends)}")
    lines[1:1] = session.ceilings.lines()
    lines.extend(f"note: {n}" for n in session.notes)
    for line in lines:
        terminalreporter.write_line(line)


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_machine_info(config: pytest.Config, machine_info: dict[str, Any]) -> None:
    """Put the GPU in pytest-benchmark's machine_info (saved runs and --benchmark-compare see it).
    pytest-benchmark asks at start-up too, when it loads runs to compare, so probe here."""
    session = config.stash.get(ATTN_SESSION, None)
    if session is not None:
        machine_info["attn_device"] = session.device.as_machine_info()
        if session.device.is_cuda:
            from .fingerprint import fingerprint_of

            machine_info["attn_fingerprint"] = fingerprint_of(session.device, session.clock_lock).as_dict()
