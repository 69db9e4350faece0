"""Saved runs that stopped part-way (Ctrl-C, a signal, ``-x``, a pytest-xdist worker lost): marked as partial in
what they save, and never what a later ``--benchmark-compare`` picks by default.

pytest-benchmark saves whatever ran, and its bare ``--benchmark-compare`` compares with the newest saved
run. Here every run an attention session saves (``--benchmark-autosave``, ``--benchmark-save``,
``--benchmark-json``) gets ``attn_partial`` -- why it stopped, how many of its cases were measured --
when it did not run to its end; a bare ``--benchmark-compare`` is pointed at the newest complete run,
and the summary says which run was skipped and why. Comparing with a partial run on purpose
(``--benchmark-compare=0004`` or ``--attn-baseline=PATH``) still works, and says it is partial.
"""

from __future__ import annotations

import errno
import json
import traceback
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest

from ..backends.base import refusal
from ..verdicts.runs import partial_note
from .gate import write_section
from .session import (
    ATTN_SESSION,
    COMPARED,
    PARTIAL,
    SHARD,
    AttnSession,
    benchmark_json_path,
    case_of_item,
)
from .signals import SIGNAL_GUARD, loop_cut
from .workers import workers_requested

HISTORY_NOTES = pytest.StashKey["list[str]"]()


def _partial(session: pytest.Session, exitstatus: int | pytest.ExitCode) -> dict[str, Any] | None:
    attn = session.config.stash.get(ATTN_SESSION, None)
    if attn is None or not attn.active:
        return None
    reason = loop_cut(session.config)  # the loop over the cases ended by a signal, -x, an error (plugin.signals)
    if reason is None and exitstatus == pytest.ExitCode.INTERRUPTED:
        guard = session.config.stash.get(SIGNAL_GUARD, None)
        reason = f"interrupted ({guard.interrupted_by() if guard is not None else 'Ctrl-C or a signal'})"
    elif reason is None and (session.shouldstop or session.shouldfail):
        reason = f"stopped early ({session.shouldstop or session.shouldfail})"
    tally = session.config.stash.get(XDIST_TALLY, None)
    if reason is None and tally is not None:
        reason = tally.cut_short()
    if reason is None:
        return None
    return {"reason": reason, "cases_measured": len(attn.results.records), "cases_selected": runnable(session, attn)}


class XdistTally:
    """On the controller of pytest-xdist workers: the tests they collected, those they reported, and the workers that
    crashed -- a worker that crashed and was not replaced (``--max-worker-restart``) ends the run with tests never
    run, and nothing else says so (the loop ends as if it were done)."""

    def __init__(self) -> None:
        self.collected = 0
        self.reported: set[str] = set()
        self.crashed: list[str] = []

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: list[str]) -> None:
        self.collected = max(self.collected, len(ids))  # (each worker collects the whole selection)

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.reported.add(report.nodeid)

    @pytest.hookimpl(optionalhook=True)
    def pytest_testnodedown(self, node: Any, error: Any) -> None:
        if error is not None:
            self.crashed.append(str(getattr(getattr(node, "gateway", None), "id", None) or node))

    def cut_short(self) -> str | None:
        """"cut short: ..." where tests the workers collected never ran, else None."""
        never = self.collected - len(self.reported)
        if never <= 0:
            return None
        crashed = (f"worker {', '.join(self.crashed)} crashed and was not replaced" if self.crashed
                   else "its workers stopped")
        return f"cut short ({crashed}; {never} of {self.collected} tests never ran)"


XDIST_TALLY = pytest.StashKey[XdistTally]()


def runnable(session: pytest.Session, attn: AttnSession) -> int | None:
    """The selected cases this device can run: a case its back end refuses here (a GPU case on a CPU)
    is a skip, never a case the cut-short run failed to measure."""
    if attn.progress is None:
        return None
    device = attn.device_if_probed
    cases = [c for c in map(case_of_item, session.items) if c is not None]
    if device is None or not cases:
        return attn.progress.total
    try:
        return sum(1 for c in cases if refusal(attn.registry.get(c.backend), c, device) is None)
    except Exception:  # a back end's supports() failing here must not cost the saved run its mark
        return attn.progress.total


def mark_partial(session: pytest.Session, exitstatus: int) -> None:
    """Before pytest-benchmark saves (:mod:`.finish`): was this run cut short? What it saves is marked so."""
    partial = _partial(session, exitstatus)
    if partial is not None:
        session.config.stash[PARTIAL] = partial


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    partial = config.stash.get(PARTIAL, None)
    if partial is not None:
        output_json["attn_partial"] = partial
    shard = config.stash.get(SHARD, None)
    if shard is not None:
        output_json["attn_shard"] = shard


class _Quiet:
    """A logger for pytest-benchmark's storage that keeps its warnings out of start-up."""

    def warning(self, text: str, *args: Any, **kwargs: Any) -> None:
        pass

    info = debug = error = warning


def _saved_runs(config: pytest.Config) -> list[tuple[Path, dict[str, Any]]]:
    """pytest-benchmark's saved runs, oldest first, read as it reads them (file storage only)."""
    try:
        from pytest_benchmark.utils import get_machine_id, load_storage

        storage = load_storage(config.getoption("benchmark_storage"), logger=_Quiet(),
                               default_machine_id=get_machine_id(), netrc=config.getoption("benchmark_netrc", ""))
        return [(Path(path), data) for path, data in storage.load()]
    except Exception:  # another storage kind, or none yet: leave pytest-benchmark's choice alone
        return []


class SavingGuard:
    """pytest-benchmark writes ``--benchmark-json`` and its saved runs in place, at the end of the session:
    a full disk leaves them cut short (invalid JSON) and a raw OSError that loses the summary. Registered at
    configure -- inside pytest's terminal reporter, outside pytest-benchmark's save -- this catches the
    error, removes each file the failed write cut short, and ends the run with exit status 4 and a message
    naming the file and the fix, after the summary. Files that are whole are left as they are. Any other
    exception at the session's end (a plugin's or conftest's hook) is reported the same way, with its
    traceback, exit status 3."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def _targets(self) -> set[Path]:
        """The files pytest-benchmark may write: the ``--benchmark-json`` file and the runs in file storage."""
        found = set()
        json_path = benchmark_json_path(self.config)
        if json_path is not None:
            found.add(json_path)
        storage = str(self.config.getoption("benchmark_storage", "") or "")
        if storage.startswith("file://") and Path(storage[7:]).is_dir():
            found.update(Path(storage[7:]).rglob("*.json"))
        return found

    @pytest.hookimpl(wrapper=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> Generator[None, None, None]:
        attn = self.config.stash.get(ATTN_SESSION, None)
        active = attn is not None and attn.active
        before = {p: p.stat().st_mtime_ns for p in self._targets() if p.is_file()} if active else {}
        try:
            return (yield)
        except Exception as exc:
            if not active:  # not an attention run: the error as it was
                raise
            self._after(session, exc, before)
            return None

    def _after(self, session: pytest.Session, exc: Exception, before: dict[Path, int]) -> None:
        """The end of an attention run failed: remove what it cut short (a file it wrote that is not whole
        JSON; others' files are left alone), say what and why, set the status (4 for a file that could not be
        written, 3 -- pytest's internal error -- for anything else)."""
        removed = [p for p in sorted(self._targets())
                   if p.is_file() and before.get(p) != p.stat().st_mtime_ns and not _whole_json(p)]
        for path in removed:
            path.unlink(missing_ok=True)
        gone = f"; {', '.join(map(str, removed))} cut short and removed (no truncated JSON left)" if removed else ""
        after = ("The results above were measured, and the gate, a baseline and reports were done before it; what"
                 " came after it in the session's end did not run.")
        notes = self.config.stash.setdefault(HISTORY_NOTES, [])
        if isinstance(exc, OSError):
            where = exc.filename or (f"writing {removed[0]}" if len(removed) == 1 else "a file being written")
            full = exc.errno in (errno.ENOSPC, errno.EFBIG, errno.EDQUOT)
            fix = ("Free space there (or point --benchmark-json / --benchmark-storage elsewhere) and rerun" if full
                   else "Check that path (--benchmark-json / --benchmark-storage) and rerun")
            notes.append(f"error: saving the run failed: {exc.strerror or exc} ({where}){gone}. {after} {fix}")
            status = pytest.ExitCode.USAGE_ERROR
        else:
            notes.append(f"error: the end of the session failed: {type(exc).__name__}: {exc}{gone}. {after} The"
                         " traceback (a hook of a plugin or conftest raised it):")
            notes += "".join(traceback.format_exception(exc)).rstrip().splitlines()
            status = pytest.ExitCode.INTERNAL_ERROR
        if session.exitstatus != pytest.ExitCode.INTERRUPTED:
            session.exitstatus = status


def end_step_failed(session: pytest.Session, step: str, exc: Exception) -> None:
    """A step of the end before pytest-benchmark's saving raised (:mod:`.finish`): said last, with its traceback, and
    the run ends with exit status 3 -- but the steps after it, and pytest-benchmark's saving, still run."""
    notes = session.config.stash.setdefault(HISTORY_NOTES, [])
    notes.append(f"error: the end of the session failed in {step}: {type(exc).__name__}: {exc}. The steps after it,"
                 " and pytest-benchmark's saving, still ran. The traceback:")
    notes += "".join(traceback.format_exception(exc)).rstrip().splitlines()
    if session.exitstatus != pytest.ExitCode.INTERRUPTED:
        session.exitstatus = pytest.ExitCode.INTERNAL_ERROR


def _whole_json(path: Path) -> bool:
    try:
        json.loads(path.read_bytes())
    except (OSError, ValueError):
        return False
    return True


def pytest_configure(config: pytest.Config) -> None:
    """After the suites' conftest set the storage (tryfirst), before pytest-benchmark loads the run to
    compare with (trylast): a bare ``--benchmark-compare`` means the newest *complete* run. And the
    :class:`SavingGuard` of an attention session."""
    if config.stash.get(ATTN_SESSION, None) is not None and not config.pluginmanager.has_plugin("pytest-attn-saving"):
        config.pluginmanager.register(SavingGuard(config), "pytest-attn-saving")
        if workers_requested(config):
            tally = config.stash[XDIST_TALLY] = XdistTally()
            config.pluginmanager.register(tally, "pytest-attn-xdist-tally")
    compare = config.getoption("benchmark_compare", None)
    if config.stash.get(ATTN_SESSION, None) is None or not compare:
        return
    notes = config.stash.setdefault(HISTORY_NOTES, [])
    runs = _saved_runs(config)
    if compare is True and runs and partial_note(runs[-1][1]):
        complete = [path for path, data in runs if not partial_note(data)]
        skipped = f"the newest saved run {runs[-1][0].stem} is partial ({partial_note(runs[-1][1])})"
        if complete:
            config.option.benchmark_compare = complete[-1].name.split("_")[0]
            notes.append(f"--benchmark-compare: {skipped}; compared with {complete[-1].stem}, the newest complete"
                         " one (name a run to compare with it anyway: --benchmark-compare=NNNN)")
        else:
            notes.append(f"--benchmark-compare: {skipped}, and no complete run is saved; compared with it")
    elif isinstance(compare, str):
        for path, data in runs:
            if path.name.startswith(compare) and partial_note(data):
                notes.append(f"--benchmark-compare={compare}: {path.stem} is a partial run ({partial_note(data)})")


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_compare_machine_info(config: pytest.Config, compared_benchmark: dict[str, Any]) -> None:
    """Each saved run pytest-benchmark loaded for ``--benchmark-compare`` (its public hook, once per run), kept
    for the summary's "vs saved" column, by the name of its file where it is found among the saved runs."""
    if config.stash.get(ATTN_SESSION, None) is None:
        return
    when = compared_benchmark.get("datetime")
    names = [path.stem for path, data in _saved_runs(config) if when is not None and data.get("datetime") == when]
    name = f"saved run {names[-1]}" if names else f"the run saved {when or 'at an unknown time'}"
    config.stash.setdefault(COMPARED, []).append((name, compared_benchmark))


def history_section(terminalreporter: Any, config: pytest.Config) -> None:
    """Last of all (:mod:`.finish`): a failed save is the last thing the run says."""
    notes = config.stash.get(HISTORY_NOTES, [])
    partial = config.stash.get(PARTIAL, None)
    attn = config.stash.get(ATTN_SESSION, None)
    if partial is not None and attn is not None and attn.results.records:
        notes = [*notes, f"this run is partial ({partial_note({'attn_partial': partial})}): what it saved is marked"
                         " so, and a bare --benchmark-compare will skip it"]
    write_section(terminalreporter, "pytest-attn history", notes)
