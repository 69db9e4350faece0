"""How an attention case that is not measured ends: skipped with its reason, or refused -- failed with the
message that says what was wrong (a wrong result, a failing call) -- each counted for the summary, handed to the
controller under pytest-xdist, and, for a refused case, told to pytest-benchmark as a benchmark that raised."""

from __future__ import annotations

import contextlib
from typing import Any, NoReturn

import pytest

from ..engine.runner import CaseFailed
from .handover import FAILED, SKIP, send
from .session import AttnSession
from .workers import is_worker


def skip_case(request: pytest.FixtureRequest, session: AttnSession, reason: str) -> NoReturn:
    """Skip the case with ``reason``, counted for the summary's "skipped" lines."""
    session.results.skipped(reason)
    if is_worker(request.config):
        send(request, SKIP, reason.splitlines()[0])
    pytest.skip(reason)


def refuse_case(request: pytest.FixtureRequest, benchmark: Any, session: AttnSession, backend: str, message: str,
                used: bool) -> NoReturn:
    """Fail the case with ``message`` alone (``pytrace=False``: the message says it all), counted for the
    summary's line of the back ends that ran. pytest-benchmark hears first that the benchmark raised -- what its
    own fixture records for a benchmarked function that raises (nothing kept, nothing saved) -- unless the case
    already ``used`` it, so it does not add "Benchmark fixture was not used at all" to each refused case."""
    session.results.failed(backend)
    if is_worker(request.config):
        send(request, FAILED, backend)
    if not used:
        with contextlib.suppress(CaseFailed):
            benchmark.pedantic(_raise, (message,), rounds=1)
    pytest.fail(message, pytrace=False)


def _raise(message: str) -> NoReturn:
    raise CaseFailed(message)
