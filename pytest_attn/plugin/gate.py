"""The gate's wiring: stored baselines, verdicts and reports at the end of the session.

* Gate: when a baseline is stored for this device (``baselines/<device-key>/baseline.json``: the GPU's
  name, or ``cpu-<model>`` on a CPU) or given with ``--attn-baseline=PATH``, every result gets a verdict
  (:mod:`pytest_attn.verdicts.gate`); the verdicts ``--attn-fail-on`` names (SLOWER by default) make the
  exit status non-zero, and so does a run that matched no case of its baseline. A baseline from another
  device is refused with both names. A given baseline is read at start-up: a missing or corrupt file
  stops the run before anything is measured.
* ``--attn-save-baseline`` stores this run as the device's baseline; ``--attn-add-to-baseline`` adds it
  to the stored one as one more independent repeat (:mod:`pytest_attn.verdicts.baseline`).
* ``--attn-report=DIR`` writes summary.md, results.csv and plots; with ``$GITHUB_STEP_SUMMARY`` set
  the Markdown is appended there too.

Everything is read from the session's result records; nothing waits for pytest-benchmark's JSON.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import pytest

from ..verdicts.baseline import (
    BaselineError,
    baseline_path,
    load_baseline,
    save_baseline,
    stored_device,
    stored_fingerprint,
)
from ..verdicts.fingerprint import Fingerprint, differences, fingerprint_of
from ..verdicts.gate import ASSUMED_CPU_RUN_NOISE, ASSUMED_RUN_NOISE, Noise, compare, matched, regressions
from ..verdicts.reports import counts, markdown, terminal_lines, write_reports
from ..verdicts.runs import benches, by_name
from .benchjson import run_json
from .history import partial_note
from .session import ATTN_SESSION, CPU_THREADS, GATE_LINES, AttnSession

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
    if gate.save and gate.add:
        raise pytest.UsageError("--attn-save-baseline and --attn-add-to-baseline: give one (save records a new"
                                " baseline, add adds this run to the stored one as a repeat)")
    if gate.baseline not in ("auto", "off") and not (gate.save or gate.add):
        try:
            config.stash[GIVEN_BASELINE] = load_baseline(Path(gate.baseline))
        except BaselineError as exc:
            raise pytest.UsageError(f"--attn-baseline: {exc}") from None
    if gate.save or gate.add:
        writable_dir(gate.baselines_dir, "--attn-baselines-dir")
    if gate.report is not None:
        writable_dir(gate.report, "--attn-report")
    if session.options.trace_dir is not None:
        writable_dir(session.options.trace_dir, "--attn-trace-dir")
    config.stash[GATE_LINES] = []


def _fingerprint(config: pytest.Config, attn: AttnSession) -> Fingerprint | None:
    device = attn.device_if_probed
    if device is None:
        return None
    return fingerprint_of(device, attn.clock_lock, config.stash.get(CPU_THREADS, None))


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    attn = session.config.stash.get(ATTN_SESSION, None)
    if attn is None or not attn.records:
        return
    lines = session.config.stash[GATE_LINES]
    gate = attn.gate
    fp = _fingerprint(session.config, attn)
    if gate.save or gate.add:
        _save(session, attn, fp, lines)
        return
    if gate.baseline == "off" or fp is None:
        return
    if gate.baseline != "auto":
        _gate(session, attn, fp, session.config.stash[GIVEN_BASELINE], gate.baseline, lines)
        return
    path = baseline_path(gate.baselines_dir, fp.key)
    if not path.exists():
        lines.append(f"no stored baseline for {fp.device} ({path}); record one with --attn-save-baseline:"
                     " every result is NEW")
        if gate.report is not None:
            _finish(session, attn, {"benchmarks": []}, "none", [], lines)
        return
    try:
        base = load_baseline(path)
    except BaselineError as exc:
        lines.append(f"error: {exc}")
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return
    _gate(session, attn, fp, base, str(path), lines)


def _save(session: pytest.Session, attn: AttnSession, fp: Fingerprint | None, lines: list[str]) -> None:
    flag = "--attn-add-to-baseline" if attn.gate.add else "--attn-save-baseline"
    if fp is None:
        lines.append(f"{flag}: nothing saved (no case was measured)")
        return
    if session.exitstatus == pytest.ExitCode.INTERRUPTED:
        lines.append(f"{flag}: nothing saved: the run was interrupted ({len(attn.records)} cases measured)")
        return
    try:
        lines.append(save_baseline(baseline_path(attn.gate.baselines_dir, fp.key), run_json(attn.records,
                                   session.config), fp, force=attn.gate.force, add=attn.gate.add))
    except BaselineError as exc:
        lines.append(f"error: {flag}: {exc}")
        session.exitstatus = pytest.ExitCode.USAGE_ERROR


def _refusal(base: dict[str, Any], name: str, fp: Fingerprint) -> tuple[str | None, list[str]]:
    """Why ``base`` cannot gate this run (another device), and the notes for one that can."""
    stored = stored_fingerprint(base)
    if stored is not None:
        blocking, informing = differences(stored, fp)
        if blocking:
            return (f"baseline {name} was recorded on {stored.device}; this run is on {fp.device}"
                    f" ({'; '.join(blocking)}): not compared. Record one for this device with --attn-save-baseline"
                    ), []
        return None, [f"differs from the baseline: {d}" for d in informing]
    device = stored_device(base)
    if device is not None and device != fp.device:
        return (f"baseline {name} was recorded on {device}; this run is on {fp.device}: not compared. Record one"
                " for this device with --attn-save-baseline"), []
    return None, [f"baseline {name} has no fingerprint: it cannot be checked to be from this device"]


def _gate(session: pytest.Session, attn: AttnSession, fp: Fingerprint, base: dict[str, Any], name: str,
          lines: list[str]) -> None:
    refused, notes = _refusal(base, name, fp)
    if refused:
        lines.append(f"error: {refused}")
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return
    partial = partial_note(base)
    if partial:
        notes.append(f"the baseline is a partial run: {partial}")
    _finish(session, attn, base, name, notes, lines, assumed=ASSUMED_RUN_NOISE if fp.kind == "cuda"
            else ASSUMED_CPU_RUN_NOISE)


def _finish(session: pytest.Session, attn: AttnSession, base: dict[str, Any], name: str, notes: list[str],
            lines: list[str], assumed: float = ASSUMED_RUN_NOISE) -> None:
    """Verdicts, reports, the step summary and the exit status."""
    old, new = benches(base), by_name(attn.records)
    noise = Noise.of(old, new, assumed)
    comparisons = compare(old, new, attn.gate.thresholds, noise)
    if old:
        notes = [*notes, noise.describe()]
    lines.extend(terminal_lines(comparisons, name, notes))
    fail_on = attn.gate.fail_on
    if attn.gate.report is not None:
        for written in write_reports(attn.gate.report, comparisons, name, attn.records, notes, fail_on):
            lines.append(f"  {written}" if " skipped" in written else f"  wrote {written}")
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_file:
        with open(summary_file, "a") as fh:
            fh.write(markdown(comparisons, name, notes, fail_on))
    failing = regressions(comparisons, fail_on)
    if old and not matched(comparisons):
        lines.append(f"error: no case of this run is in the baseline {name} ({len(old)} cases there, {len(new)}"
                     " here): nothing was compared. Run the baseline's selection, or record a baseline for this one")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    elif failing:
        lines.append(f"failed: {counts(failing)} (--attn-fail-on={','.join(v.lower() for v in fail_on)})")
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    lines = config.stash.get(GATE_LINES, [])
    if lines:
        terminalreporter.write_sep("=", "pytest-attn gate")
        for line in lines:
            terminalreporter.write_line(line)
