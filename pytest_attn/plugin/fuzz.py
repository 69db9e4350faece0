"""The fuzz suite's wiring: the Hypothesis profile, the ``attn_fuzzer`` fixture, opt-in on a GPU, and
the examples-run summary.

Hypothesis is to fuzzing what torch is to measuring: the fuzz layer imports it at module top, and it
costs 0.12 s to import, so this wiring imports the fuzz layer only where fuzzing may happen -- an
attention run (:func:`~pytest_attn.plugin.session.prepare_attention_run`), a profile named on the
command line, the fixture -- never when the plugin loads into an unrelated pytest session.
"""

from __future__ import annotations

import os
from typing import Any

import pytest

from ..core.device import DeviceInfo
from ..fuzz.example import FuzzFailure
from .gate import write_section
from .handover import FUZZ_REACH_OUTPUT, send_at_end
from .options import given
from .session import (
    ATTENTION_RUN,
    FUZZ_PROFILE,
    FUZZ_REACH,
    FUZZER,
    VISIBLE_GPUS,
    attn_session,
    options_of,
    prepare_attention_run,
)


def _named_profile(config: pytest.Config) -> str | None:
    return config.getoption("hypothesis_profile", None) or os.environ.get("HYPOTHESIS_PROFILE") or None


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    """Register pytest-attn's profiles before Hypothesis' plugin loads the one ``--hypothesis-profile`` (or
    ``HYPOTHESIS_PROFILE``) names."""
    if _named_profile(config):
        from ..fuzz import profiles  # noqa: F401  (registers ci, gpu and thorough)


def pytest_sessionstart(session: pytest.Session) -> None:
    """In an attention run, the profile fuzz tests run under: after Hypothesis' plugin has loaded a named
    one, before any test module is imported (Hypothesis reads the profile when a test is decorated)."""
    config = session.config
    if given(config):
        prepare_attention_run(config)
    gpus = config.stash.get(VISIBLE_GPUS, [])
    if _named_profile(config) or (config.stash.get(ATTENTION_RUN, False) and (not gpus or fuzz_opted_in(config))):
        from ..fuzz import profiles  # Hypothesis: 1-2 s to import, so not for a GPU run that fuzzes nothing

        config.stash[FUZZ_PROFILE] = _load_profile(config, profiles, has_gpu=bool(gpus))


def _load_profile(config: pytest.Config, profiles: Any, has_gpu: bool) -> str:
    """The profile the fuzz tests run under: Hypothesis' own option (or ``HYPOTHESIS_PROFILE``) when
    given, else ``gpu`` on a GPU and ``ci`` without; ``--attn-fuzz-examples`` sets its example count."""
    from hypothesis import settings

    named = _named_profile(config)
    profile = named or profiles.default_profile(has_gpu)
    if not named:
        settings.load_profile(profile)
    examples = options_of(config).fuzz_examples
    if examples is not None:
        profile = profiles.with_examples(profile, examples)
        settings.load_profile(profile)
    return profile


def fuzz_opted_in(config: pytest.Config) -> bool:
    """On a GPU the fuzz suite runs only when asked: ``--attn-fuzz`` or a test_fuzz file named."""
    return options_of(config).fuzz or any("test_fuzz" in str(a) for a in config.args)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """On a GPU, fuzz tests skip unless opted in, so `pytest suites/` stays a benchmark run."""
    fuzz_items = [i for i in items if "fuzz_target" in getattr(i, "fixturenames", ())]
    if not fuzz_items or fuzz_opted_in(config) or not attn_session(config).has_gpu:
        return
    for item in fuzz_items:  # the file named as the user stands: relative to where pytest was started
        where = os.path.relpath(item.path, config.invocation_params.dir)
        item.add_marker(pytest.mark.skip(reason="fuzzing is opt-in on a GPU (it compiles kernels for many shapes):"
                                                f" add --attn-fuzz (pytest {where} --attn-fuzz)"))


class FuzzCheck:
    """What the ``attn_fuzzer`` fixture gives a fuzz test: ``run(backend, direction)`` runs the whole
    property (every relation of lengths the back end takes, each its share of the profile's examples);
    ``check(backend, direction, data)`` runs one example inside a test's own ``@given``. Either skips
    the test when the back end cannot be fuzzed here."""

    def __init__(self, fuzzer: Any) -> None:
        self.fuzzer = fuzzer
        self.registry, self.device = fuzzer.registry, fuzzer.device

    def run(self, name: str, direction: str) -> None:
        """A wrong result fails the test with the report alone -- verdict, worst element, replay of the
        shrunk case -- not the fuzzer's source, its traceback and Hypothesis' dump of the same draws."""
        found: FuzzFailure | None = None
        try:
            refused = self.fuzzer.run(name, direction)
        except FuzzFailure as exc:
            found = exc
        if found is not None:
            pytest.fail(found.report, pytrace=False)
        if refused is not None:
            pytest.skip(refused.reason)

    def check(self, name: str, direction: str, data: Any) -> None:
        refused = self.fuzzer.check(name, direction, data)
        if refused is not None:
            pytest.skip(refused.reason)


@pytest.fixture(scope="session")
def attn_fuzzer(request: pytest.FixtureRequest, attn_device: DeviceInfo) -> FuzzCheck:
    """Runs the fuzz property: ``attn_fuzzer.run(backend, direction)`` (see suites/test_fuzz_varlen.py),
    or one example, ``attn_fuzzer.check(backend, direction, data)``, inside a ``@given`` test."""
    from ..fuzz.fuzzer import Fuzzer

    session = attn_session(request.config)
    fuzzer = Fuzzer(session.registry, attn_device, dtypes=session.options.dtypes,
                    head_dims=session.options.fuzz_head_dims)
    request.config.stash[FUZZER] = fuzzer
    return FuzzCheck(fuzzer)


def _fuzz_failures(exc: BaseException) -> list[FuzzFailure]:
    """The wrong results an exception carries: itself, or every one of an exception group (Hypothesis raises a
    group when it found several distinct failures) -- none where anything else failed too."""
    if isinstance(exc, FuzzFailure):
        return [exc]
    members = getattr(exc, "exceptions", None)  # an exception group (the exceptiongroup backport on 3.10)
    if not isinstance(members, (list, tuple)) or not members:
        return []
    found = [_fuzz_failures(e) for e in members]
    return [f for fs in found for f in fs] if all(found) else []


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Any:
    """A wrong result in a test of one's own (``@given`` around ``attn_fuzzer.check``) reads as the suite's do:
    the verdict, the worst element and the replay -- not the fuzzer's source, its traceback and Hypothesis' dump
    of the same draws (the shrunk case is in the report, and the replay runs it)."""
    report = yield
    if report.failed and call.excinfo is not None:
        failures = _fuzz_failures(call.excinfo.value)
        if failures:
            report.longrepr = "\n\n".join(f.report for f in failures)
    return report


def _reach(config: pytest.Config) -> dict[tuple[str, str], Any]:
    """Each fuzzed back end and direction's :class:`~pytest_attn.fuzz.fuzzer.Reach`: this process's, and
    under pytest-xdist the controller's, from its workers."""
    fuzzer = config.stash.get(FUZZER, None)
    handed: dict[tuple[str, str], Any] = config.stash.get(FUZZ_REACH, {})
    return {**handed, **(fuzzer.reach if fuzzer is not None else {})}


def _unreached(config: pytest.Config) -> list[str]:
    return [f"{name} {direction}: no {', '.join(reach.missing())} example ran, though the back end takes"
            f" {'it' if len(reach.missing()) == 1 else 'them'} ({reach.describe()})"
            for (name, direction), reach in sorted(_reach(config).items()) if reach.missing()]


def judge_reach(session: pytest.Session) -> None:
    """A relation of lengths (self, prefix, decode, cross) a back end takes but no example reached fails
    the run: that back end lost a whole class of shapes without a word otherwise. A pytest-xdist worker
    hands its reach to the controller instead, which judges them all."""
    config = session.config
    if hasattr(config, "workeroutput"):
        fuzzer = config.stash.get(FUZZER, None)
        if fuzzer is not None:
            send_at_end(config, FUZZ_REACH_OUTPUT,
                        [[name, direction, reach.to_json()] for (name, direction), reach in fuzzer.reach.items()])
        return
    if _unreached(config) and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def fuzz_section(terminalreporter: Any, config: pytest.Config) -> None:
    reaches = _reach(config)
    if not any(r.total or r.refused for r in reaches.values()):
        return
    lines = [f"hypothesis profile: {config.stash.get(FUZZ_PROFILE, '?')}; examples that ran per back end and"
             " direction, by relation of key to query lengths (self: equal, prefix: cached keys before the queries,"
             " decode: 1-4 queries, cross: unrelated, serving: ragged KV caches with appends):"]
    lines += [f"  {name} {direction}: {reach.describe()}" for (name, direction), reach in sorted(reaches.items())]
    lines += [f"FAILED reach: {line}; the back end refuses these drawn cases or the strategy never draws them"
              for line in _unreached(config)]
    write_section(terminalreporter, "pytest-attn fuzz", lines)
