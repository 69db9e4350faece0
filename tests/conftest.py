"""Fixtures for the plugin's own tests: CPU only, fakes for GPU, NVML and timers; the two tiers (tests/README.md);
the guard that fails a run which wrote into the checkout."""

from __future__ import annotations

import contextlib
import gc
import os
import sys
from pathlib import Path

import pytest
from checkout_guard import CheckoutGuard

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
#: The end-to-end tier's marker; ``slow`` is its older name (tests marked so by other branches go with it).
E2E, E2E_ALIASES = "e2e", ("slow",)
_E2E_LEFT = pytest.StashKey[int]()  # how many end-to-end tests this run left out


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """``pytest tests/`` runs in one pytest-xdist worker per usable CPU (at most 4), where there are two or more:
    a worker's start (torch, Hypothesis, the plugin) costs ~6 CPU-s, and on an idle 2-core machine two workers
    still halve the fast tier's wall time. ``-n N`` (``-n 0``: one process) or ``-p no:xdist`` overrides it."""
    if getattr(config.option, "numprocesses", "absent") is None and not hasattr(config, "workerinput"):
        from pytest_attn.engine.threads import usable_cpus

        cpus = usable_cpus()
        if cpus >= 2:
            config.option.numprocesses = min(4, cpus)
            if config.option.dist == "no":
                config.option.dist = "worksteal"  # a few tests take seconds, most milliseconds


def _e2e_asked(config: pytest.Config) -> bool:
    """The end-to-end tier runs where ``-m`` names it (or its older name): ``-m`` then decides alone."""
    markexpr = config.getoption("markexpr", "") or ""
    return any(name in markexpr for name in (E2E, *E2E_ALIASES))


def _named(config: pytest.Config) -> list[str]:
    """The tests named one by one on the command line (``path::name``), as node ids."""
    ids = []
    for arg in map(str, config.args):
        path, sep, rest = arg.partition("::")
        if sep:
            with contextlib.suppress(ValueError):
                path = Path(config.invocation_params.dir, path).resolve().relative_to(config.rootpath).as_posix()
            ids.append(f"{path}::{rest}")
    return ids


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """One tier under both names (``-m "not slow"`` leaves it out as ``-m "not e2e"`` does), left out unless ``-m``
    names it; an end-to-end test named by its id runs all the same."""
    names = (E2E, *E2E_ALIASES)
    for item in items:
        if any(item.get_closest_marker(name) for name in names):
            for name in names:
                if not item.get_closest_marker(name):
                    item.add_marker(name)
    if _e2e_asked(config):
        return
    named = tuple(_named(config))
    e2e = [item for item in items if item.get_closest_marker(E2E) and not item.nodeid.startswith(named or ("\0",))]
    if e2e:
        config.hook.pytest_deselected(items=e2e)
        left = set(map(id, e2e))
        items[:] = [item for item in items if id(item) not in left]
        config.stash[_E2E_LEFT] = len(e2e)


def pytest_report_header(config):
    if not _e2e_asked(config):
        return "pytest-attn's fast tier: the end-to-end tier (real processes) runs with -m e2e (tests/README.md)"
    return None


def pytest_terminal_summary(terminalreporter, config):
    left = config.stash.get(_E2E_LEFT, 0)
    if left:
        terminalreporter.write_line(f"{left} end-to-end test(s) deselected (real processes: README recipes, A/B arms,"
                                    f" signals, pytest-xdist; transformers); run them with: pytest tests/ -m e2e")


def _kept_outside_the_checkout() -> None:
    """What the processes of this run would write where they stand (the checkout) or compile again in each goes to
    one folder of the system's temporary folder, ``pytest-attn-tests-<uid>``, kept between runs:

    * Hypothesis' storage (its example database and its cache of the constants in local modules): Hypothesis
      takes the folder it was first imported in, the checkout, for every in-process child session too, and a
      process a test starts (an arm, an xdist worker) stands in the checkout;
    * the bytecode of the processes this run starts -- pytest-xdist's workers, the end-to-end tier's pytest and
      arm processes -- and pytest's rewritten test modules, even where PYTHONDONTWRITEBYTECODE is set: each would
      compile and rewrite the plugin, Hypothesis and these test modules again (~5 CPU-s a pytest worker). The
      first run fills it (~60 MB).

    A PYTHONPYCACHEPREFIX or HYPOTHESIS_STORAGE_DIRECTORY of the user's own is kept."""
    import tempfile

    uid = os.getuid() if hasattr(os, "getuid") else 0
    folder = Path(tempfile.gettempdir()) / f"pytest-attn-tests-{uid}"
    try:
        folder.mkdir(mode=0o700, exist_ok=True)
        if folder.is_symlink() or folder.stat().st_uid != uid:  # another user's folder: not to be trusted
            return
    except OSError:
        return
    if not os.environ.get("HYPOTHESIS_STORAGE_DIRECTORY"):
        os.environ["HYPOTHESIS_STORAGE_DIRECTORY"] = str(folder / "hypothesis")
        with contextlib.suppress(ImportError):
            from hypothesis import configuration

            configuration.set_hypothesis_home_dir(folder / "hypothesis")  # imported already, maybe its home read
    if not os.environ.get("PYTHONPYCACHEPREFIX"):
        os.environ.pop("PYTHONDONTWRITEBYTECODE", None)
        os.environ["PYTHONPYCACHEPREFIX"] = str(folder / "pycache")
        if sys.pycache_prefix is None:  # this process too: with -n 0 it rewrites every test module itself (~6 CPU-s)
            sys.pycache_prefix, sys.dont_write_bytecode = str(folder / "pycache"), False


@pytest.fixture(autouse=True)
def _not_an_xdist_worker(monkeypatch):
    """A child session these tests start (pytester) is its own run, not a worker of theirs: pytest-benchmark
    disables itself where it sees ``PYTEST_XDIST_WORKER``, and the plugin's workers would read the rest."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)  # (pytest-xdist sets it in workers): a child's lines stay whole


#: What every in-process child session (pytester) imports: pytester drops the modules a child imported when it
#: ends, so without this each child imports them again -- Hypothesis, pytest-benchmark's session, the plugin's
#: modules (about 1 s a child), the sympy that torch's first SDPA call pulls in (about 450 modules, ~1 s) and
#: matplotlib for a run's report (~1.5 s).
CHILD_IMPORTS = ("hypothesis", "pytest_attn.fuzz.fuzzer", "pytest_attn.fuzz.profiles", "pytest_attn.plugin.bench",
                 "pytest_attn.plugin.gate", "pytest_attn.plugin.history", "pytest_attn.verdicts.plots",
                 "pytest_benchmark.session", "pytest_benchmark.storage.file", "pytest_benchmark.csv",
                 "pytest_benchmark.histogram", "xdist.plugin", "execnet", "filelock", "zoneinfo", "xml.dom.minidom",
                 "cpuinfo", "torch.fx.experimental.symbolic_shapes", "matplotlib.pyplot")


def _once(fn):
    """``fn`` run once per process, its answer reused (it takes no arguments that change it)."""
    import functools

    @functools.wraps(fn)
    def once(*args, **kwargs):
        key = (args, tuple(sorted(kwargs.items())))
        if key not in once.answers:
            once.answers[key] = fn(*args, **kwargs)
        return once.answers[key]

    once.answers = {}
    return once


def _share_with_child_sessions() -> None:
    """Do once for this process what every in-process child session would do again: import what they import
    (:data:`CHILD_IMPORTS`), and probe the machine -- py-cpuinfo starts a Python to read the CPU (0.3 s, for
    pytest-benchmark's machine_info) and the plugin times this CPU's matrix products (1.3 s, to refuse cases a
    CPU cannot finish). Both answer the same for every child: this machine did not change between them."""
    import importlib

    for name in CHILD_IMPORTS:
        with contextlib.suppress(ImportError):
            importlib.import_module(name)
    with contextlib.suppress(ImportError):
        import cpuinfo

        cpuinfo.get_cpu_info = _once(cpuinfo.get_cpu_info)
    with contextlib.suppress(ImportError):
        from pytest_attn.plugin import session

        session.cpu_gflops = _once(session.cpu_gflops)
    _read_plugin_entry_points_once()
    _rewrite_each_test_source_once()
    _shorter_warm_ups()


def _shorter_warm_ups() -> None:
    """A child session warms each real case up for at least 0.01 s, not the plugin's 0.05 s: what a test reads of a
    warm-up (that it settles, what the summary says of it) holds, and the rule itself is tested with explicit values
    (test_stopping.py, test_sampling.py). The six files of child sessions: 53 -> 42 CPU-s."""
    import inspect

    from pytest_attn.engine.stopping import WarmupRule

    names = list(inspect.signature(WarmupRule).parameters)  # every field has a default: one per parameter
    defaults = list(WarmupRule.__init__.__defaults__ or ())
    defaults[names.index("min_time_s")] = 0.01
    WarmupRule.__init__.__defaults__ = tuple(defaults)


def _read_plugin_entry_points_once() -> None:
    """pytest reads every installed distribution's entry points again at each session's start, to find its
    plugins: 8.3 of the fast tier's ~100 CPU-s (py-spy). Nothing is installed while the tests run, so each child
    session is given what the first read found; where an entry point is loaded and registered stays pluggy's."""
    import importlib.metadata

    import pluggy

    found = [(dist, list(dist.entry_points)) for dist in importlib.metadata.distributions()]

    def load_setuptools_entrypoints(self, group: str, name: str | None = None) -> int:
        count = 0
        for dist, points in found:
            for ep in points:
                if ep.group != group or (name is not None and ep.name != name) or self.has_plugin(ep.name) \
                        or self.is_blocked(ep.name):
                    continue
                plugin = ep.load()
                self.register(plugin, name=ep.name)
                self._plugin_distinfo.append((plugin, dist))
                count += 1
        return count

    pluggy.PluginManager.load_setuptools_entrypoints = load_setuptools_entrypoints  # type: ignore[method-assign]


def _rewrite_each_test_source_once() -> None:
    """pytest rewrites the asserts of every test file and conftest a child session imports; the child sessions
    write the same few sources into fresh folders, so its cache on disk never hits: 6.5 of the fast tier's ~100
    CPU-s (py-spy). The code rewritten once is reused under each file's own name."""
    import types

    from _pytest.assertion import rewrite

    rewrite_test = rewrite._rewrite_test
    done: dict[tuple[bytes, bool], tuple[bytes, types.CodeType]] = {}

    def renamed(code: types.CodeType, name: str) -> types.CodeType:
        consts = tuple(renamed(c, name) if isinstance(c, types.CodeType) else c for c in code.co_consts)
        return code.replace(co_filename=name, co_consts=consts)

    def rewrite_once(fn: Path, config: pytest.Config) -> tuple[bytes, types.CodeType]:
        key = (fn.read_bytes(), bool(config.getini("enable_assertion_pass_hook")))
        if key not in done:
            done[key] = rewrite_test(fn, config)
        source_hash, code = done[key]
        return source_hash, renamed(code, str(fn))

    rewrite._rewrite_test = rewrite_once


def pytest_configure(config):
    """A run that writes into the checkout fails (:class:`CheckoutGuard`, in the process that reports the run);
    what its processes write where they stand goes elsewhere (:func:`_kept_outside_the_checkout`).
    torch's CPU threads as an attention run on this machine sets them (half the usable CPUs): on a
    2-core CI box with one core busy, a full-width pool makes every parallel op wait for the busy core.
    The controller of this suite's own xdist workers runs no test: nothing to set up there."""
    if not hasattr(config, "workerinput"):
        config.pluginmanager.register(CheckoutGuard(ROOT), "pytest-attn-checkout-guard")
        _kept_outside_the_checkout()  # before pytest-xdist starts its workers, which inherit it
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        return
    from pytest_attn.engine.threads import auto_threads, set_torch_threads, usable_cpus

    with contextlib.suppress(ImportError):  # without torch, the tests that need it skip themselves
        set_torch_threads(auto_threads(usable_cpus()))
    _share_with_child_sessions()


class FakeNvml:
    """NVML stand-in: returns the clocks it is given, in order, then repeats the last."""

    status = "ok"

    def __init__(self, clocks=(1980,), max_clock=1980, reasons=0, driver="580.00", power=700.0):
        self._clocks = list(clocks)
        self._max, self._reasons, self._driver, self._power = max_clock, reasons, driver, power

    def sm_clock_mhz(self):
        return self._clocks.pop(0) if len(self._clocks) > 1 else self._clocks[0]

    def max_sm_clock_mhz(self):
        return self._max

    def clocks_event_reasons(self):
        return self._reasons

    def driver_version(self):
        return self._driver

    def power_limit_w(self):
        return self._power

    def ecc_mode(self):
        return "on"

    def mig_mode(self):
        return "off"


@pytest.fixture
def fake_nvml():
    return FakeNvml


class FakeTimer:
    """Timer stand-in: hands out the given samples in order (cycling) and advances a fake clock."""

    kind = "fake"
    calls_per_sample = 1

    def __init__(self, samples, clock=None):
        self._samples = list(samples)
        self._i = 0
        self._clock = clock

    def sample(self):
        value = self._samples[self._i % len(self._samples)]
        self._i += 1
        if self._clock is not None:
            self._clock.advance(value)
        return value


class FakeClock:
    def __init__(self):
        self.now = 0.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


@pytest.fixture
def fake_clock():
    return FakeClock()


@pytest.fixture
def fake_timer():
    return FakeTimer


def pytest_collection_finish(session):
    """What is alive once the tests are collected (torch, Hypothesis, the plugin, every test module) lives to
    the end: out of the collector's sight, the ``gc.collect()`` the plugin makes after each case of a child
    session walks only what the tests made since (5.8 of the fast tier's ~100 CPU-s went to it, py-spy)."""
    gc.freeze()
