"""The session: options resolved once at ``pytest_configure``, the back ends, the device (probed on
first use), and what the run produced. Every stash key of the plugin is here.

Nothing costly happens at configure: the registry is built (back-end modules import no library) and
the options are checked; torch, the device and NVML are touched only once an attention case is
collected, an ``--attn-*`` option is given, or a suite's conftest calls :func:`prepare_attention_run`.
"""

from __future__ import annotations

import contextlib
import dataclasses
import os
import sys
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..backends import QUIET_WARNINGS, assemble_registry, installed_versions
from ..backends.base import Registry, RegistryError
from ..core.case import AttnCase
from ..core.catalog import SMOKE_LEAVES_OUT, profile_variants
from ..core.device import DeviceInfo
from ..engine.ceilings import CeilingCache
from ..engine.compile import CompileReport
from ..engine.nvml import NoNvml, Nvml, VisibleGpu, visible_devices
from ..engine.probe import cpu_gflops, probe_device, process_age_s
from ..engine.runner import RunSettings
from ..engine.slowed import SlowedBackend
from ..engine.stopping import StopRule, WarmupRule
from ..engine.threads import auto_threads, set_torch_threads, usable_cpus
from ..verdicts.ab.paired import AbResult
from ..verdicts.fingerprint import gpu_key
from ..verdicts.layout import wrap
from ..verdicts.rule import Thresholds
from ..verdicts.verdict import DEFAULT_FAIL_ON
from .hints import not_loaded
from .options import DEFAULT_SUSTAINED_S, AttnOptions
from .progress import Progress, WallTimes
from .results import Results

if TYPE_CHECKING:  # the stash keys' types (type checkers only: Hypothesis and the clocks stay unimported)
    from ..engine.clocks import ClockLocker
    from ..fuzz.fuzzer import Fuzzer, Reach

DEFAULT_STORAGE = "file://./.benchmarks"
BASELINES_DIR = "baselines"  # --attn-baselines-dir's default, under the rootdir


@dataclass(frozen=True)
class GateOptions:
    thresholds: Thresholds
    baseline: str  # "auto", "off" or a path
    baselines_dir: Path
    save: bool
    force: bool
    report: Path | None
    fail_on: tuple[str, ...] = DEFAULT_FAIL_ON
    add: bool = False  # --attn-add-to-baseline
    dir_given: bool = False  # --attn-baselines-dir was given: a gate was asked for (its folder must exist)
    second_look: str = "auto"  # --attn-second-look: auto (on a GPU), on, off

    @classmethod
    def of(cls, config: pytest.Config) -> GateOptions:
        get = config.getoption
        folder = get("attn_baselines_dir")
        return cls(Thresholds.build(get("attn_threshold"), get("attn_threshold_for")), get("attn_baseline"),
                   config.rootpath / folder, get("attn_save_baseline"), get("attn_force"),
                   get("attn_report"), get("attn_fail_on"), get("attn_add_to_baseline"), folder != BASELINES_DIR,
                   get("attn_second_look"))


class AttnSession:
    """State of one pytest session: resolved options, back ends, device; what it measured is :attr:`results`
    (:class:`~.results.Results`)."""

    def __init__(self, config: pytest.Config, options: AttnOptions, gate: GateOptions) -> None:
        self.config = config
        self.options = options
        self.gate = gate
        self.results = Results()  # what was measured and skipped, and the summary's notes
        self.clock_lock = "not locked"
        self.ceilings = CeilingCache()
        self.compiled = CompileReport()  # the compile phase before the first sample
        self.progress: Progress | None = None
        self.wall = WallTimes(before_load_s=process_age_s() or 0.0)
        self._device: tuple[DeviceInfo, Nvml] | None = None
        self.kinds_asked: list[str] = []  # the suite kinds tests asked for cases of (:meth:`cases`)
        #: the attention tests collected: (their parents' names, the function's name), for what -k matches
        self.attention_tests: set[tuple[tuple[str, ...], str]] = set()

    # ---- back ends -------------------------------------------------------------------------------
    @cached_property
    def registry(self) -> Registry:
        """Built-in back ends, entry points and conftest registrations (and the deliberate slowdown)."""
        try:
            impls = self.config.hook.pytest_attn_register_backends.get_hookimpls()
            registry = assemble_registry(hook_impls=reversed(impls), config=self.config)  # as pluggy calls them
        except RegistryError as exc:
            raise pytest.UsageError(f"registering back ends: {exc}") from None
        slowdown = self.options.inject_slowdown
        return registry.wrapped(lambda b: SlowedBackend(b, slowdown)) if slowdown else registry

    @cached_property
    def libraries(self) -> dict[str, str]:
        """The installed version of each distribution the registered back ends measure: the fingerprint's."""
        return installed_versions(self.registry.distributions())

    @cached_property
    def backends(self) -> tuple[str, ...]:
        shapes = [v.shape.name for v in self.options.adhoc]
        twice = sorted({n for n in shapes if shapes.count(n) > 1})
        loaded = [w.workload.name for w in self.options.workloads]
        if dup := sorted({n for n in loaded if loaded.count(n) > 1}):
            raise pytest.UsageError(f"--attn-workload: two workloads are named {', '.join(dup)}: give each once")
        if twice:
            raise pytest.UsageError(f"--attn-case: {', '.join(twice)} is given twice (the same shape, or the same"
                                    " name=); give each problem once, or name them apart with name=")
        try:
            names = self.options.resolve_backends(self.registry.names(), self.registry.default_names())
        except ValueError as exc:
            raise pytest.UsageError(str(exc)) from None
        if self.options.speedup_vs not in self.registry.names():
            raise pytest.UsageError(f"--attn-speedup-vs={self.options.speedup_vs!r} is not a back end; known:"
                                    f" {', '.join(self.registry.names())}")
        unknown = self.gate.thresholds.unknown(self.registry.names())
        if unknown:
            raise pytest.UsageError(f"--attn-threshold-for names no back end: {', '.join(unknown)}; known:"
                                    f" {', '.join(self.registry.names())}")
        return names

    def backends_for(self, kind: str) -> list[str]:
        """The selected back ends that take part in a suite kind (some, such as the mask suite's
        forced-custom-mask expressions or the decode-only KV-cache calls, declare ``only_suites``)."""
        names = []
        for name in self.backends:
            only = getattr(self.registry.get(name), "only_suites", ())
            if not only or kind in only or kind == "all":
                names.append(name)
        return names

    # ---- device ----------------------------------------------------------------------------------
    @property
    def active(self) -> bool:
        """An attention run (see :func:`prepare_attention_run`), or one that has touched the device."""
        return self.config.stash.get(ATTENTION_RUN, False) or self._device is not None

    @property
    def device(self) -> DeviceInfo:
        if self._device is None:
            device, nvml = probe_device()
            pinned = self.config.stash.get(PINNED, None)
            if pinned is not None and device.is_cuda:  # a worker's GPU: tagged with its place among the run's
                device = dataclasses.replace(device, host_index=pinned[0])
            self._device = (device, nvml)
        return self._device[0]

    @property
    def nvml(self) -> Nvml:
        return self._device[1] if self._device is not None else NoNvml("device not probed")

    @property
    def device_if_probed(self) -> DeviceInfo | None:
        return self._device[0] if self._device is not None else None

    @cached_property
    def has_gpu(self) -> bool:
        """Whether torch sees a CUDA device (no device probe, no CUDA context)."""
        import torch

        return torch.cuda.is_available()

    @cached_property
    def profile(self) -> str:
        if self.options.profile != "auto":
            return self.options.profile
        return "default" if self.has_gpu else "cpu"

    @cached_property
    def settings(self) -> RunSettings:
        o = self.options
        if o.timer not in ("auto", "cpu") and not self.device.is_cuda:
            self.results.note(f"--attn-timer={o.timer} has no effect on a CPU: every case is timed with"
                              " time.perf_counter (the cpu timer)")
        return RunSettings(
            timer=o.timer,
            stop=StopRule(target_precision=o.precision, min_samples=o.min_samples,
                          max_time_s=o.max_time_for(self.profile)),
            warmup=WarmupRule(max_time_s=2.0 if self.profile == "cpu" else 10.0),
            verify=o.verify, peak_tflops=o.peak_tflops, drop_throttled=o.drop_throttled,
            verify_timing=o.verify_timing, trace_dir=o.trace_dir, clock_lock=self.clock_lock,
            cpu_gflops=None if self.device.is_cuda else cpu_gflops(),
            sustained_s=o.sustained_s or (DEFAULT_SUSTAINED_S if self.profile == "sustained" else None),
        )

    # ---- cases ------------------------------------------------------------------------------------
    def cases(self, kind: str = "prefill") -> list[AttnCase]:
        """The profile's cases of one kind ("prefill", "decode", "varlen", "masks" or "all") for the
        selected back ends, dtypes and directions, back ends innermost so one problem's results sit
        together."""
        if kind not in self.kinds_asked:
            self.kinds_asked.append(kind)
        only_adhoc = self.options.adhoc and self.options.profile == "auto"
        variants = [] if only_adhoc else profile_variants(self.profile, kind)
        variants += [v for v in self.options.adhoc if v.shape.kind == kind or kind == "all"]
        if self.options.dtypes:
            variants = [v for v in variants if v.dtype in self.options.dtypes]
        if self.options.directions:
            variants = [v for v in variants if v.direction in self.options.directions]
        backends = self.backends_for(kind)
        if self.profile == "smoke" and "default" in self.options.backends:
            backends = [b for b in backends if b not in SMOKE_LEAVES_OUT]
        return [v.case(b) for v in variants for b in backends]

    def test_names(self, case_id: str) -> list[str]:
        """The names ``-k`` is matched against for a case ``case_id`` of the attention tests collected: each
        test's own (``function[case id]``) and its parents'; the case id alone where none was collected."""
        names = [n for parents, function in self.attention_tests for n in (*parents, f"{function}[{case_id}]")]
        return names or [case_id]


ATTN_SESSION = pytest.StashKey[AttnSession]()
ATTENTION_RUN = pytest.StashKey[bool]()  # set by prepare_attention_run
VISIBLE_GPUS = pytest.StashKey[list[VisibleGpu]]()  # what NVML saw when the run was prepared
CLOCK_LOCKER: pytest.StashKey[ClockLocker] = pytest.StashKey()  # --attn-lock-clocks: it restores the clocks
FUZZER: pytest.StashKey[Fuzzer] = pytest.StashKey()  # the session's fuzzer, once a fuzz test ran
FUZZ_REACH: pytest.StashKey[dict[tuple[str, str], Reach]] = pytest.StashKey()  # the workers' fuzz reach
FUZZ_PROFILE = pytest.StashKey[str]()  # the Hypothesis profile the fuzz tests run under
GATE_LINES = pytest.StashKey["list[str]"]()
PINNED = pytest.StashKey[tuple[int, str]]()  # a pytest-xdist worker: (its GPU's place among the run's, UUID)
SHARD = pytest.StashKey[dict[str, Any]]()  # --attn-shard: what the run's JSON records (workers.shard_mark)
#: --attn-ab on the controller of pytest-xdist workers: the cases' outcomes and the arm lines they handed over
AB_HANDED = pytest.StashKey[list[AbResult]]()
AB_WORKER_LINES = pytest.StashKey[list[str]]()
AB_LINES = pytest.StashKey[list[str]]()  # --attn-ab: the A/B summary, once the session finished
CPU_THREADS = pytest.StashKey[str]()  # what torch's CPU thread count was set to, and why (for the summary)
ATTENTION_WHY = pytest.StashKey[str]()  # why the session is an attention run (plugin.detect), for the summary
PARTIAL = pytest.StashKey[dict[str, Any]]()  # a run cut short: why, cases measured and selected (plugin.history)
#: --benchmark-compare: (a name for it, the run) of each saved run pytest-benchmark loaded to compare with
COMPARED = pytest.StashKey[list[tuple[str, dict[str, Any]]]]()
#: the node ids the run collected (after -k, --attn-shard; on the controller of workers, what they collected)
SELECTED = pytest.StashKey["set[str]"]()
NOT_MEASURED = pytest.StashKey["dict[str, str]"]()  # why a collected test recorded no result, by node id (plugin.gate)
#: the stored baselines this run is gated against (or adds a repeat to), read and checked at start-up, by path
STORED_BASELINES = pytest.StashKey["dict[Path, dict[str, Any]]"]()


def timing_disabled(config: pytest.Config) -> bool:
    """pytest-benchmark's ``--benchmark-disable`` is in force (given, and not overridden by ``--benchmark-enable``):
    each case is checked and run once, nothing timed."""
    return bool(config.getoption("benchmark_disable", False)) and not config.getoption("benchmark_enable", False)


def terminal_width(config: pytest.Config) -> int | None:
    """The terminal's width in columns where the output goes to one (or ``COLUMNS`` says its width); None for a
    pipe or a log file, whose lines stay whole (a CI log is searched, not read at a width)."""
    if not (sys.stdout.isatty() or os.environ.get("COLUMNS")):
        return None
    return int(config.get_terminal_writer().fullwidth)


def terminal_say(config: pytest.Config, prefix: str = "pytest-attn") -> Callable[[str], None]:
    """``say(line)``: a line to the terminal now, also from inside a test (past pytest's output capture), on a
    line of its own (not after ``-q``'s dots) and wrapped to the terminal's width."""
    def say(line: str) -> None:
        reporter = config.pluginmanager.get_plugin("terminalreporter")
        capture = config.pluginmanager.get_plugin("capturemanager")
        if reporter is not None:
            with capture.global_and_fixture_disabled() if capture is not None else contextlib.nullcontext():
                writer = config.get_terminal_writer()
                if writer.width_of_current_line:
                    writer.line()
                for part in wrap([f"{prefix}: {line}"], terminal_width(config)):
                    reporter.write_line(part)
                reporter.flush()

    return say


def options_of(config: pytest.Config) -> AttnOptions:
    """The ``--attn-*`` options, converted once: the session's (parsed now where none was made: ``--help``)."""
    session = config.stash.get(ATTN_SESSION, None)
    return session.options if session is not None else AttnOptions.of(config)


def attn_session(config: pytest.Config) -> AttnSession:
    """The session's state; a :class:`pytest.UsageError` that says how to load the plugin where it is not."""
    session = config.stash.get(ATTN_SESSION, None)
    if session is None:
        raise pytest.UsageError(not_loaded())
    return session


def attn_cases(config: pytest.Config, kind: str = "prefill") -> list[AttnCase]:
    """Cases for a suite's ``pytest_generate_tests``; see suites/test_prefill.py."""
    return attn_session(config).cases(kind)


def fuzz_targets(config: pytest.Config) -> list[tuple[str, str]]:
    """(back end, direction) pairs to fuzz: every selected back end but the reference itself, forward,
    and forward+backward where it has a backward (``--attn-directions`` narrows them)."""
    session = attn_session(config)
    wanted = session.options.directions or ("fwd", "fwd+bwd")
    targets: list[tuple[str, str]] = []
    for name in session.backends:
        backend = session.registry.get(name)
        if name == "reference":
            continue
        targets.extend((name, d) for d in wanted if d == "fwd" or backend.has_backward)
    return targets


def prepare_attention_run(config: pytest.Config, why: str = "a conftest called prepare_attention_run") -> None:
    """Prepare an attention run; the plugin calls it at configure wherever the session is one
    (:mod:`.detect`: an ``--attn-*`` option, a back end registered, a test file taking pytest-attn's fixtures),
    so a project of one's own needs no conftest call. What it sets: pytest-benchmark's ``machine_info`` gets
    the GPU; the run is saved for a later ``--benchmark-compare`` (pytest-benchmark's autosave, unless
    ``--benchmark-disable``, ``--benchmark-save`` or ``--benchmark-autosave`` decide otherwise), in the rootdir's
    ``.benchmarks/`` wherever pytest is started from, on a GPU per GPU model (``.benchmarks/<gpu-key>/``, unless
    ``--benchmark-storage`` is given: two GPUs' runs are never compared); pytest-benchmark's own tables are left
    out (the plugin's table has the same figures and more, and with ``--benchmark-compare`` each case's change;
    any ``--benchmark-columns``, ``--benchmark-group-by``, ``--benchmark-verbose`` or ``--benchmark-histogram``
    brings them back); torch's CPU threads on a machine without a GPU (``--attn-cpu-threads``); pytest-attn's
    Hypothesis profile for the fuzz tests; the libraries' warnings that are not the user's business
    (:data:`~pytest_attn.backends.QUIET_WARNINGS`) filtered. Costs an NVML query (no CUDA context); the
    summary's first line says what was set and ``why``."""
    if config.stash.get(ATTENTION_RUN, False):
        return
    if not config.pluginmanager.is_registered(sys.modules["pytest_attn.plugin"]):
        raise pytest.UsageError(not_loaded())  # at start-up, not as a KeyError while collecting
    config.stash[ATTENTION_RUN] = True
    config.stash[ATTENTION_WHY] = why
    for quiet in QUIET_WARNINGS:  # e.g. the CuTe DSL's note on every FA4 kernel it compiles
        config.addinivalue_line("filterwarnings", quiet.ini_line())
    found = config.stash[VISIBLE_GPUS] = visible_devices()
    config.stash[CPU_THREADS] = _cpu_threads(config.getoption("attn_cpu_threads", "auto"), has_gpu=bool(found))
    if config.getoption("benchmark_storage", DEFAULT_STORAGE) == DEFAULT_STORAGE:
        # the project's history, wherever pytest is started from in it (pytest-benchmark's default is the folder
        # one runs from), and on a GPU one folder per GPU model
        folder = config.rootpath / ".benchmarks" / (gpu_key(found[0].name) if found else "")
        config.option.benchmark_storage = f"file://{str(folder).rstrip('/')}"
    _benchmark_options(config)


#: pytest-benchmark options that ask for its own tables: given, they are shown.
TABLE_OPTIONS = ("--benchmark-columns", "--benchmark-group-by", "--benchmark-verbose", "--benchmark-histogram",
                 "--benchmark-sort", "--benchmark-name", "--benchmark-cprofile")


def _benchmark_options(config: pytest.Config) -> None:
    """Autosave for ``--benchmark-compare``, and pytest-benchmark's tables quiet unless asked for (set before
    pytest-benchmark reads its options, at the end of configure)."""
    disabled = timing_disabled(config)
    if not disabled and not config.getoption("benchmark_autosave", False) and \
            not config.getoption("benchmark_save", None) and not hasattr(config, "workerinput"):
        from pytest_benchmark.utils import get_tag  # the name --benchmark-autosave itself uses

        config.option.benchmark_autosave = get_tag()
        # a run that measured nothing says so itself (plugin.summary): pytest-benchmark's warning, which it gives
        # after pytest's own warning capture has ended, would only repeat it
        warnings.filterwarnings("ignore", message="Not saving anything, no benchmarks have been run")
    args = [str(a) for a in config.invocation_params.args]
    if not any(a.startswith(TABLE_OPTIONS) for a in args):
        config.option.benchmark_quiet = True


def _cpu_threads(option: str | int, has_gpu: bool) -> str:
    """Set torch's CPU threads as ``--attn-cpu-threads`` says (see :mod:`pytest_attn.engine.threads`);
    says what it did."""
    if option == "auto":
        if has_gpu:
            return "torch's default (a GPU run)"
        cpus = usable_cpus()
        return f"{set_torch_threads(auto_threads(cpus))} (auto: half of the {cpus} CPUs this process may use)"
    return f"{set_torch_threads(int(option))} (--attn-cpu-threads)"


def benchmark_json_path(config: pytest.Config) -> Path | None:
    """Where ``--benchmark-json`` writes: pytest-benchmark 5.3 keeps the path it was given, earlier
    releases (5.2 and before, ``argparse.FileType("wb")``) a file they opened while parsing it."""
    given = config.getoption("benchmark_json", None)
    if given is None:
        return None
    if isinstance(given, (str, Path)):
        return Path(given)
    name = getattr(given, "name", None)  # an open file
    return Path(name) if isinstance(name, str) else None


def case_of_item(item: pytest.Item) -> AttnCase | None:
    """The case a parametrized attention test measures (its first AttnCase parameter), or None."""
    if "attn_bench" not in getattr(item, "fixturenames", ()):
        return None
    params = getattr(getattr(item, "callspec", None), "params", {})
    return next((v for v in params.values() if isinstance(v, AttnCase)), None)  # whatever its name
