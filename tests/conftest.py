"""Fixtures for the plugin's own tests: CPU only, fakes for GPU, NVML and timers."""

from __future__ import annotations

import contextlib

import pytest

pytest_plugins = ["pytester"]


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config):
    """``pytest tests/`` runs in one pytest-xdist worker per usable CPU (at most 4): most of these tests
    wait on child pytest sessions. ``-n N`` (``-n 0``: one process) or ``-p no:xdist`` overrides it."""
    if getattr(config.option, "numprocesses", "absent") is None and not hasattr(config, "workerinput"):
        from pytest_attn.engine.threads import usable_cpus

        config.option.numprocesses = min(4, usable_cpus())
        if config.option.dist == "no":
            config.option.dist = "worksteal"  # a few tests take seconds, most milliseconds

@pytest.fixture(autouse=True)
def _not_an_xdist_worker(monkeypatch):
    """A child session these tests start (pytester) is its own run, not a worker of theirs: pytest-benchmark
    disables itself where it sees ``PYTEST_XDIST_WORKER``, and the plugin's workers would read the rest."""
    for name in ("PYTEST_XDIST_WORKER", "PYTEST_XDIST_WORKER_COUNT", "PYTEST_XDIST_TESTRUNUID"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.delenv("COLUMNS", raising=False)  # (pytest-xdist sets it in workers): a child's lines stay whole


def _warm_child_imports() -> None:
    """Import what every in-process child session (pytester) imports: pytester drops the modules a child
    imported when it ends, so without this each child imports Hypothesis, pytest-benchmark's session and the
    plugin's modules again (about 1 s a child; the gate's end-to-end tests start dozens)."""
    import importlib

    for name in ("hypothesis", "pytest_attn.fuzz.fuzzer", "pytest_attn.fuzz.profiles", "pytest_attn.plugin.bench",
                 "pytest_attn.plugin.gate", "pytest_attn.plugin.history", "pytest_attn.verdicts.plots",
                 "pytest_benchmark.session", "pytest_benchmark.storage.file", "pytest_benchmark.csv",
                 "pytest_benchmark.histogram", "xdist.plugin", "execnet", "filelock", "zoneinfo", "xml.dom.minidom"):
        with contextlib.suppress(ImportError):
            importlib.import_module(name)


def pytest_configure(config):
    """torch's CPU threads as an attention run on this machine sets them (half the usable CPUs): on a
    2-core CI box with one core busy, a full-width pool makes every parallel op wait for the busy core.
    The controller of this suite's own xdist workers runs no test: nothing to set up there."""
    if config.getoption("numprocesses", None) and not hasattr(config, "workerinput"):
        return
    from pytest_attn.engine.threads import auto_threads, set_torch_threads, usable_cpus

    with contextlib.suppress(ImportError):  # without torch, the tests that need it skip themselves
        set_torch_threads(auto_threads(usable_cpus()))
    _warm_child_imports()


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
