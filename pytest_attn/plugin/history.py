"""Saved runs that stopped part-way (Ctrl-C, a signal, ``-x``): marked as partial in what they save, and
never what a later ``--benchmark-compare`` picks by default.

pytest-benchmark saves whatever ran, and its bare ``--benchmark-compare`` compares with the newest saved
run. Here every run an attention session saves (``--benchmark-autosave``, ``--benchmark-save``,
``--benchmark-json``) gets ``attn_partial`` -- why it stopped, how many of its cases were measured --
when it did not run to its end; a bare ``--benchmark-compare`` is pointed at the newest complete run,
and the summary says which run was skipped and why. Comparing with a partial run on purpose
(``--benchmark-compare=0004`` or ``--attn-baseline=PATH``) still works, and says it is partial.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from ..verdicts.runs import partial_note
from .session import ATTN_SESSION, attn_session

PARTIAL = pytest.StashKey[dict[str, Any]]()
HISTORY_NOTES = pytest.StashKey["list[str]"]()


def _partial(session: pytest.Session, exitstatus: int | pytest.ExitCode) -> dict[str, Any] | None:
    attn = session.config.stash.get(ATTN_SESSION, None)
    if attn is None or not attn.active:
        return None
    if exitstatus == pytest.ExitCode.INTERRUPTED:
        reason = "interrupted (Ctrl-C or a signal)"
    elif session.shouldstop or session.shouldfail:
        reason = f"stopped early ({session.shouldstop or session.shouldfail})"
    else:
        return None
    return {"reason": reason, "cases_measured": len(attn.records),
            "cases_selected": attn.progress.total if attn.progress is not None else None}


@pytest.hookimpl(hookwrapper=True, tryfirst=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> Any:
    """Before pytest-benchmark saves (its wrapper saves before it yields): was this run cut short?"""
    partial = _partial(session, exitstatus)
    if partial is not None:
        session.config.stash[PARTIAL] = partial
    yield


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    partial = config.stash.get(PARTIAL, None)
    if partial is not None:
        output_json["attn_partial"] = partial


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


def pytest_configure(config: pytest.Config) -> None:
    """After the suites' conftest set the storage (tryfirst), before pytest-benchmark loads the run to
    compare with (trylast): a bare ``--benchmark-compare`` means the newest *complete* run."""
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


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    notes = config.stash.get(HISTORY_NOTES, [])
    partial = config.stash.get(PARTIAL, None)
    if partial is not None and config.stash.get(ATTN_SESSION, None) is not None and attn_session(config).records:
        notes = [*notes, f"this run is partial ({partial_note({'attn_partial': partial})}): what it saved is marked"
                         " so, and a bare --benchmark-compare will skip it"]
    if notes:
        terminalreporter.write_sep("=", "pytest-attn history")
        for line in notes:
            terminalreporter.write_line(line)
