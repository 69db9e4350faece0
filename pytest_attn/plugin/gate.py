"""The gate's wiring: stored baselines, verdicts and reports at the end of the session.

* Gate: when a baseline is stored for this GPU (``baselines/<gpu-key>/baseline.json``) or given with
  ``--attn-baseline=PATH``, every result gets a verdict (:mod:`pytest_attn.verdicts.gate`) and any
  SLOWER makes the exit status non-zero. A given baseline is read at start-up: a missing or corrupt
  file stops the run before anything is measured.
* ``--attn-save-baseline`` stores this run as the GPU's baseline (:mod:`pytest_attn.verdicts.baseline`).
* ``--attn-report=DIR`` writes summary.md, results.csv and plots; with ``$GITHUB_STEP_SUMMARY`` set
  the Markdown is appended there too.

Everything is read from the session's result records; nothing waits for pytest-benchmark's JSON.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ..verdicts.baseline import BaselineError, baseline_path, load_baseline, save_baseline, stored_fingerprint
from ..verdicts.fingerprint import differences, fingerprint_of
from ..verdicts.gate import compare, regressions
from ..verdicts.reports import markdown, terminal_lines, write_reports
from ..verdicts.runs import benches, by_name
from .benchjson import run_json
from .session import ATTN_SESSION, GATE_LINES, AttnSession

GIVEN_BASELINE = pytest.StashKey[dict[str, Any]]()


def writable_dir(path: Path, flag: str) -> None:
    """Make ``path`` (and its parents) and prove it takes a file, or stop at start-up saying why."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        probe = path / ".pytest-attn-write-test"
        probe.write_text("")
        probe.unlink()
    except OSError as exc:
        raise pytest.UsageError(f"{flag}={path}: cannot write there ({exc.strerror or exc}); give a folder you"
                                " can write to") from None


def pytest_configure(config: pytest.Config) -> None:
    """Every path an option names is checked now, before anything is measured."""
    session = config.stash.get(ATTN_SESSION, None)
    if session is None:
        return
    gate = session.gate
    if gate.baseline not in ("auto", "off") and not gate.save:
        try:
            config.stash[GIVEN_BASELINE] = load_baseline(Path(gate.baseline))
        except BaselineError as exc:
            raise pytest.UsageError(f"--attn-baseline: {exc}") from None
    if gate.save:
        writable_dir(gate.baselines_dir, "--attn-baselines-dir")
    if gate.report is not None:
        writable_dir(gate.report, "--attn-report")
    if session.options.trace_dir is not None:
        writable_dir(session.options.trace_dir, "--attn-trace-dir")
    config.stash[GATE_LINES] = []


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    attn = session.config.stash.get(ATTN_SESSION, None)
    if attn is None or not attn.records:
        return
    lines = session.config.stash[GATE_LINES]
    gate = attn.gate
    device = attn.device_if_probed
    if gate.save:
        _save(session, attn, lines)
        return
    if gate.baseline == "off":
        return
    if gate.baseline != "auto":
        _gate(session, attn, session.config.stash[GIVEN_BASELINE], gate.baseline, lines)
        return
    if device is None or not device.is_cuda:
        if gate.report is not None:  # every result NEW: the report still has the figures
            lines.append("no baseline for a run without a GPU: every result is NEW (give one with --attn-baseline)")
            _finish(session, attn, {"benchmarks": []}, "none", [], lines)
        return
    path = baseline_path(gate.baselines_dir, fingerprint_of(device).key)
    if not path.exists():
        lines.append(f"no stored baseline for this GPU ({path}); record one with --attn-save-baseline")
        if gate.report is not None:
            _finish(session, attn, {"benchmarks": []}, "none", [], lines)
        return
    try:
        base = load_baseline(path)
    except BaselineError as exc:
        lines.append(f"error: {exc}")
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return
    _gate(session, attn, base, str(path), lines)


def _save(session: pytest.Session, attn: AttnSession, lines: list[str]) -> None:
    device = attn.device_if_probed
    if device is None or not device.is_cuda:
        lines.append("--attn-save-baseline: nothing saved (no GPU results in this run)")
        return
    fp = fingerprint_of(device, attn.clock_lock)
    try:
        lines.append(save_baseline(baseline_path(attn.gate.baselines_dir, fp.key),
                                   run_json(attn.records, session.config), fp, force=attn.gate.force))
    except BaselineError as exc:
        lines.append(f"error: {exc}")
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


def _gate(session: pytest.Session, attn: AttnSession, base: dict[str, Any], name: str, lines: list[str]) -> None:
    device = attn.device_if_probed
    notes: list[str] = []
    stored = stored_fingerprint(base)
    if stored is not None and device is not None and device.is_cuda:
        blocking, informing = differences(stored, fingerprint_of(device, attn.clock_lock))
        if blocking:
            lines.append(f"error: baseline {name} was recorded on another GPU ({'; '.join(blocking)}): not"
                         " compared. Record one for this GPU with --attn-save-baseline")
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        notes = [f"differs from the baseline: {d}" for d in informing]
    elif stored is None:
        notes.append(f"baseline {name} has no fingerprint: it cannot be checked to be from this GPU")
    _finish(session, attn, base, name, notes, lines)


def _finish(session: pytest.Session, attn: AttnSession, base: dict[str, Any], name: str, notes: list[str],
            lines: list[str]) -> None:
    """Verdicts, reports, the step summary and the exit status."""
    comparisons = compare(benches(base), by_name(attn.records), attn.gate.thresholds)
    lines.extend(terminal_lines(comparisons, name, notes))
    if attn.gate.report is not None:
        for written in write_reports(attn.gate.report, comparisons, name, attn.records, notes):
            lines.append(f"  {written}" if " skipped" in written else f"  wrote {written}")
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_file:
        with open(summary_file, "a") as fh:
            fh.write(markdown(comparisons, name, notes))
    if regressions(comparisons):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.stash.get(GATE_LINES, [])
    if lines:
        terminalreporter.write_sep("=", "pytest-attn gate")
        for line in lines:
            terminalreporter.write_line(line)
