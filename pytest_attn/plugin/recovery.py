"""What was measured survives a process that dies: each case kept in the run's journal as it ends
(:mod:`pytest_attn.core.journal`), the journal removed once the run's end is done, and one left by a run that
never got there said at start-up, with the command that recovers it (``pytest-attn recover``).

The journal is kept by the process that saves the run: a single process, or the controller of pytest-xdist
workers (each worker's results reach it as the worker's cases end, so a worker that crashes loses only the case
it was running). It lives in the project, ``<rootdir>/.pytest-attn/journals/``, beside pytest-benchmark's
``.benchmarks``: the next run started anywhere in the project finds it. A journal that cannot be written (a
read-only checkout) costs nothing but itself: the run goes on, and its summary says so.
"""

from __future__ import annotations

import datetime
import os
import platform
import sys
from pathlib import Path

import pytest

from ..core.files import InputError
from ..core.journal import Header, JournalWriter, journal_folder, orphans, read_journal, this_host
from ..core.record import Record
from .benchjson import benchmark_entry
from .history import runnable
from .second_look import is_child
from .session import ATTN_SESSION, AttnSession, terminal_say
from .workers import is_worker

CASE_JOURNAL = "pytest-attn-journal"


class CaseJournal:
    """This run's journal: opened at its first result, a line per result, closed (and removed) by :func:`close`."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config
        self.session: pytest.Session | None = None
        self.writer: JournalWriter | None = None
        self.seen = 0  # results looked at so far
        self.broken = False  # could not be written: tried no more

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.session = session

    @pytest.hookimpl(trylast=True)  # after the controller took a worker's record (plugin.handover)
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        attn = self.config.stash.get(ATTN_SESSION, None)
        if attn is None or len(attn.results.records) <= self.seen:
            return
        new, self.seen = attn.results.records[self.seen:], len(attn.results.records)
        if not self.broken:
            self.keep(attn, new)

    def keep(self, attn: AttnSession, records: list[Record]) -> None:
        try:
            if self.writer is None:
                self.writer = JournalWriter.open(journal_folder(self.config.rootpath), self._header(attn))
            for record in records:
                self.writer.keep(benchmark_entry(record))
        except (OSError, ValueError) as exc:  # (ValueError: a number JSON cannot hold)
            self.broken = True
            if self.writer is not None:
                self.writer.close(remove=True)
            folder = journal_folder(self.config.rootpath)
            attn.results.note(f"no journal: the cases of this run could not be kept in {folder} as they ended"
                              f" ({getattr(exc, 'strerror', None) or exc}); a process that dies now loses what it"
                              " measured. Make that folder writable to keep them")

    def _header(self, attn: AttnSession) -> Header:
        config = self.config
        machine_info = {"node": platform.node(), "processor": platform.processor(), "machine": platform.machine(),
                        "python_implementation": platform.python_implementation(),
                        "python_version": platform.python_version(), "release": platform.release(),
                        "system": platform.system()}  # (pytest-benchmark's "cpu" takes it 0.4 s: left out)
        config.hook.pytest_benchmark_update_machine_info(config=config, machine_info=machine_info)
        import pytest_benchmark

        return Header(this_host(), os.getpid(), datetime.datetime.now(datetime.timezone.utc).isoformat(),
                      runnable(self.session, attn) if self.session is not None else None, machine_info,
                      config.hook.pytest_benchmark_generate_commit_info(config=config),
                      str(pytest_benchmark.__version__))

    def close(self, remove: bool) -> Path | None:
        """Close the journal; returns where it stays (``remove`` False), else None."""
        writer, self.writer = self.writer, None
        if writer is None:
            return None
        writer.close(remove=remove)
        return None if remove else writer.path


def close_journal(session: pytest.Session) -> None:
    """The run's end is done (:mod:`.finish`, after pytest-benchmark saved): its journal is not needed any more."""
    journal = session.config.pluginmanager.get_plugin(CASE_JOURNAL)
    if isinstance(journal, CaseJournal):
        journal.close(remove=True)


def shown(path: Path) -> str:
    """``path`` as the user can paste it where they stand: relative to the current folder where it is inside it."""
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(path)


def recover_command(path: Path) -> str:
    return f"pytest-attn recover {shown(path)} --json recovered.json"


def orphan_lines(folder: Path) -> list[str]:
    """A line for each journal in ``folder`` whose run died before its end: what it holds, and the command."""
    lines = []
    for path in orphans(folder):
        try:
            journal = read_journal(path)
        except InputError as exc:
            lines.append(f"a run that did not finish left {shown(path)}, which cannot be read ({exc}); remove it")
            continue
        h = journal.header
        lines.append(f"a run that did not finish (pid {h.pid} on {h.host}, started {h.started}) left"
                     f" {len(journal.benchmarks)} measured case(s) in its journal {shown(path)}: recover them as a run"
                     f" (marked partial) with: {recover_command(path)} -- or remove the file")
    return lines


def pytest_configure(config: pytest.Config) -> None:
    """The journal of the process that saves the run (one process, or the controller of workers)."""
    if config.stash.get(ATTN_SESSION, None) is not None and not is_worker(config) and not is_child() and \
            not config.pluginmanager.has_plugin(CASE_JOURNAL):
        config.pluginmanager.register(CaseJournal(config), CASE_JOURNAL)


@pytest.hookimpl(trylast=True)  # (after pytest's own header)
def pytest_sessionstart(session: pytest.Session) -> None:
    """At start-up: a journal left by a run of this project that died, and how to recover it."""
    config = session.config
    attn = config.stash.get(ATTN_SESSION, None)
    if attn is None or not attn.active or is_worker(config):
        return
    say = terminal_say(config)
    for line in orphan_lines(journal_folder(config.rootpath)):
        say(line)
        attn.results.note(line)


def pytest_unconfigure(config: pytest.Config) -> None:
    """A run whose end did not get as far as closing its journal (its saving failed): its cases stay there."""
    journal = config.pluginmanager.get_plugin(CASE_JOURNAL)
    if not isinstance(journal, CaseJournal):
        return
    kept = journal.writer.kept if journal.writer is not None else 0
    left = journal.close(remove=False)
    if left is not None and kept:
        sys.stderr.write(f"pytest-attn: the {kept} measured case(s) of this run stay in its journal {shown(left)};"
                         f" recover them with: {recover_command(left)}\n")
