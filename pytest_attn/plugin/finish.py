"""The session's end, in one place and in order. Each step lives with its feature; this module says when it runs.

**Before pytest-benchmark saves** its JSON and runs (its ``pytest_sessionfinish`` wrapper saves before it yields,
so this wrapper, ``tryfirst``, runs around it):

1. :func:`.history.mark_partial` -- was the run cut short (Ctrl-C, a signal, ``-x``)? What is saved says so;
   then :func:`.second_look.second_look_session` -- the cases the gate would leave in doubt measured again in a
   fresh process, each kept as a pair of runs;
2. :func:`.bench.settle_records` -- "measured nothing" where nothing was; each result against the others of its
   problem; on the controller of pytest-xdist workers, their records handed to pytest-benchmark;
3. :func:`.gate.gate_session` -- the baseline saved or the run gated, and the reports, from the records alone
   (a failed save of pytest-benchmark's cannot cost them); then :func:`.workers.write_empty_shard` -- a shard that
   measured nothing still writes its ``--benchmark-json`` (pytest-benchmark writes none without a benchmark); and
   :func:`.second_look.hand_back` -- a second look's child writes its records for the run that started it (a
   pytest-xdist worker frees its GPU memory for such a child).

A step that fails is said (:func:`.history.end_step_failed`, its traceback among the history's lines, exit status 3)
and the steps after it run: a baseline that cannot be saved, or a report, never costs pytest-benchmark's JSON.

**After it saved** (:class:`AfterBenchmark`, a plain ``tryfirst`` hook: inside pytest-xdist's worker wrapper,
which sends what a worker hands over, and inside :class:`.history.SavingGuard`, which turns an error at the
session's end into a message):

4. :func:`.fuzz.judge_reach` -- a relation of lengths no fuzz example reached fails the run;
5. :func:`.workers.hand_over_lines` -- a worker's session lines, for the controller to print;
6. :func:`.ab.finish_ab` -- the paired A/B's verdicts, reports and exit status; its arms closed;
7. :func:`.recovery.close_journal` -- the journal of the cases, kept as each ended, removed: the run is saved.

**The terminal summary**, after pytest's own sections: the fuzz section, the summary (the table), the A/B's, the
gate's; and last of all, after pytest-benchmark's own table, the history's (a failed save is the last thing a
run says).
"""

from __future__ import annotations

import functools
from collections.abc import Generator
from typing import Any

import pytest

from .ab import ab_section, finish_ab
from .bench import settle_records
from .fuzz import fuzz_section, judge_reach
from .gate import gate_section, gate_session
from .history import end_step_failed, history_section, mark_partial
from .recovery import close_journal
from .second_look import hand_back, second_look_session
from .summary import summary_section
from .workers import hand_over_lines, write_empty_shard

SECTIONS = (fuzz_section, summary_section, ab_section, gate_section)


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Generator[None, None, None]:
    for step in (functools.partial(mark_partial, session, exitstatus), functools.partial(second_look_session, session),
                 functools.partial(settle_records, session), functools.partial(gate_session, session),
                 functools.partial(write_empty_shard, session), functools.partial(hand_back, session)):
        try:
            step()
        except Exception as exc:  # said, with its traceback; the steps after it, and pytest-benchmark's save, still run
            end_step_failed(session, step.func.__name__, exc)
    yield


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    for section in SECTIONS:
        section(terminalreporter, config)


class AfterBenchmark:
    """The steps that come after pytest-benchmark's: after its save, after its table."""

    @pytest.hookimpl(tryfirst=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        judge_reach(session)
        hand_over_lines(session)
        finish_ab(session)
        close_journal(session)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: Any, config: pytest.Config) -> None:
        history_section(terminalreporter, config)


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(AfterBenchmark(), "pytest-attn-after-benchmark")
