"""The gate's wiring: stored baselines, verdicts and reports at the end of the session.

* Gate: when a baseline is stored for a device (``baselines/<device-key>/baseline.json``: the GPU's name,
  or ``cpu-<model>`` on a CPU) or given with ``--attn-baseline=PATH``, every result gets a verdict
  (:mod:`pytest_attn.verdicts.decision`); the verdicts ``--attn-fail-on`` names (SLOWER by default) make the
  exit status non-zero, and so does a run that matched no case of its baseline. Results of several device
  models (pytest-xdist workers on different GPUs) are gated per model. A baseline from another device is
  refused with both names. The baseline is read at start-up, before anything is measured, by either route: a
  given one at configure, the one stored for the device once the run has collected an attention case and
  probed its device (on the controller of pytest-xdist workers, at configure, by NVML's names): a missing or
  corrupt file stops the run. A baseline case this run selected and did not measure is MISSING, with why
  (:mod:`pytest_attn.verdicts.selection`): the gate knows the node ids the run collected, and why each that
  recorded no result did not.
* ``--benchmark-disable`` (timing off: each case checked and run once) with an option that needs measured
  cases, or with a stored baseline for the device, stops the run at start-up, saying where the flag came from
  (``PYTEST_ADDOPTS``, ``addopts``) and how to override it (``--benchmark-enable``): it used to save nothing and
  gate nothing, with exit status 0.
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

from ..core.files import probe_writable
from ..core.record import Record, TimerPin
from ..verdicts.baseline import BaselineError, baseline_path, load_baseline, save_baseline
from ..verdicts.decision import Outcome, by_device, gate
from ..verdicts.fingerprint import Fingerprint, fingerprint_of
from ..verdicts.in_doubt import after_line
from ..verdicts.layout import wrap
from ..verdicts.reports import markdown, write_reports
from ..verdicts.runs import benches, partial_headline
from .benchjson import run_json
from .gate_inputs import NotMeasured, collected, controller_devices, gates, selection_of, stored_at_start, timing_asked
from .hints import in_this_run
from .session import (
    ATTENTION_RUN,
    ATTN_SESSION,
    CPU_THREADS,
    GATE_LINES,
    PARTIAL,
    STORED_BASELINES,
    AttnSession,
    GateOptions,
    attn_session,
    case_of_item,
    terminal_width,
)
from .workers import workers_requested

GIVEN_BASELINE = pytest.StashKey[dict[str, Any]]()
TIMER_PINS = pytest.StashKey[dict[str, TimerPin]]()
SECOND_LOOKED = pytest.StashKey[list[str]]()  # the cases measured again (plugin.second_look), gated on both runs


def _takes_a_file(folder: Path) -> None:
    """Create and remove a file of a name of its own in ``folder`` (never through a link planted there: see
    :func:`~pytest_attn.core.files.probe_writable`); raises OSError when it cannot."""
    probe_writable(folder)


def writable_dir(path: Path, flag: str) -> None:
    """Make ``path`` (and its parents) and prove it takes a file, or stop at start-up saying why."""
    try:
        path.mkdir(parents=True, exist_ok=True)
        _takes_a_file(path)
    except OSError as exc:
        raise pytest.UsageError(f"{flag}={path}: cannot write there ({exc.strerror or exc}); give a folder you"
                                " can write to") from None


def writable_file(path: Path, flag: str) -> None:
    """A file the run will write at its end (pytest-benchmark's ``--benchmark-json``): its folder must exist
    and take a file, else stop at start-up -- not after every case was measured."""
    folder = path.parent if str(path.parent) else Path(".")
    if path.is_dir():
        raise pytest.UsageError(f"{flag}={path}: that is a folder; give a file path, e.g. {path / 'run.json'}")
    if not folder.is_dir():
        raise pytest.UsageError(f"{flag}={path}: the folder {folder} does not exist; create it (mkdir -p"
                                f" {folder}) or give another path")
    try:
        _takes_a_file(folder)
    except OSError as exc:
        raise pytest.UsageError(f"{flag}={path}: cannot write in {folder} ({exc.strerror or exc}); give a path"
                                " you can write to") from None


def storage_folder(config: pytest.Config) -> None:
    """pytest-benchmark's ``--benchmark-storage`` where the run will save into it (autosave or
    ``--benchmark-save``): a file storage whose folder cannot be made or written stops the run now, naming the
    path -- not after every case was measured, with advice about free space."""
    saving = config.getoption("benchmark_autosave", None) or config.getoption("benchmark_save", None)
    storage = str(config.getoption("benchmark_storage", "") or "")
    other_kind = "://" in storage and not storage.startswith("file://")  # elasticsearch: not ours to check
    if not saving or config.getoption("benchmark_disable", False) or other_kind:
        return
    folder = Path(storage[len("file://"):] if storage.startswith("file://") else storage)
    existing = next((p for p in (folder, *folder.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise pytest.UsageError(f"--benchmark-storage={storage}: {existing} is a file, so the run cannot be saved"
                                " under it; give a folder (e.g. file://./.benchmarks)")
    try:
        _takes_a_file(existing)
    except OSError as exc:
        raise pytest.UsageError(f"--benchmark-storage={storage}: cannot write in {existing} ({exc.strerror or exc});"
                                " give a folder you can write to") from None


def pytest_configure(config: pytest.Config) -> None:
    """Every path an option names is checked now, before anything is measured."""
    session = config.stash.get(ATTN_SESSION, None)
    if session is None:
        return
    json_given = config.getoption("benchmark_json", None)  # pytest-benchmark <= 5.2: a file it opened itself
    if isinstance(json_given, (str, Path)) and not hasattr(config, "workerinput"):
        writable_file(Path(json_given), "--benchmark-json")
    if not hasattr(config, "workerinput"):
        storage_folder(config)
    gate_options = session.gate
    if gate_options.save and gate_options.add:
        raise pytest.UsageError("--attn-save-baseline and --attn-add-to-baseline: give one (save records a new"
                                " baseline, add adds this run to the stored one as a repeat)")
    if not hasattr(config, "workerinput"):
        timing_asked(config, session)
    if gate_options.baseline not in ("auto", "off") and not (gate_options.save or gate_options.add):
        try:
            config.stash[GIVEN_BASELINE] = load_baseline(Path(gate_options.baseline))
        except BaselineError as exc:
            raise pytest.UsageError(f"--attn-baseline: {exc}") from None
    if gate_options.save or gate_options.add or gate_options.baseline == "auto":  # (else no folder is read)
        _baselines_dir(gate_options.baselines_dir, gate_options.dir_given, gate_options.save)
    if gate_options.save or gate_options.add:
        writable_dir(gate_options.baselines_dir, "--attn-baselines-dir")
        if workers_requested(config):  # the controller measures nothing: its workers' GPUs, as NVML names them
            for key in sorted({fp.key for fp in controller_devices(config)}):
                device_folder(gate_options, key)
    if gate_options.report is not None:
        writable_dir(gate_options.report, "--attn-report")
    if session.options.trace_dir is not None:
        writable_dir(session.options.trace_dir, "--attn-trace-dir")
    config.stash[GATE_LINES] = []
    if workers_requested(config) and config.stash.get(ATTENTION_RUN, False) and gates(config, session):
        stored_at_start(config, controller_devices(config))  # (its workers collect and measure; it never does)
    if config.stash.get(ATTENTION_RUN, False) and not hasattr(config, "workerinput"):
        config.pluginmanager.register(NotMeasured(config), "pytest-attn-not-measured")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_node_collection_finished(node: Any, ids: list[str]) -> None:
    """On the controller of workers: what they collected is the run's selection."""
    if node.config.stash.get(ATTN_SESSION, None) is not None:
        collected(node.config, ids)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """What the run selected (the gate tells MISSING from UNSELECTED by it); and, in one process that collected an
    attention case, its device probed now (as the first case would), before the first case: the stored baseline
    of the device read and checked (:func:`.gate_inputs.stored_at_start`), and where the run saves a baseline,
    the device's own folder under the baselines folder proved writable (not found read-only once every case was
    measured)."""
    config = session.config
    attn = config.stash.get(ATTN_SESSION, None)
    if attn is None or hasattr(config, "workerinput"):
        return
    collected(config, (item.nodeid for item in session.items))
    if workers_requested(config) or config.option.collectonly or attn.options.compile_only or \
            not any(case_of_item(item) is not None for item in session.items):
        return
    if gates(config, attn):
        stored_at_start(config, [fingerprint_of(attn.device, attn.clock_lock, config.stash.get(CPU_THREADS, None))])
    if attn.gate.save or attn.gate.add:
        device_folder(attn.gate, fingerprint_of(attn.device).key)


def device_folder(options: GateOptions, key: str) -> None:
    """``baselines/<key>/`` and its baseline as the end of the run will write them, or a UsageError now: the
    nearest folder that exists takes a file, a baseline there is not read-only, and one to add to exists."""
    flag = "--attn-add-to-baseline" if options.add else "--attn-save-baseline"
    path = baseline_path(options.baselines_dir, key)
    existing = next((p for p in (path.parent, *path.parent.parents) if p.exists()), Path("."))
    if not existing.is_dir():
        raise pytest.UsageError(f"{flag}: {existing} is a file, so the baseline {path} cannot be saved; remove it or"
                                " give --attn-baselines-dir another folder")
    try:
        _takes_a_file(existing)
    except OSError as exc:
        raise pytest.UsageError(f"{flag}: cannot write in {existing} ({exc.strerror or exc}), where this device's"
                                f" baseline {path} goes; give --attn-baselines-dir a folder you can write to") from None
    if path.exists() and not os.access(path, os.W_OK):
        raise pytest.UsageError(f"{flag}: the baseline {path} is read-only; make it writable (chmod u+w {path}) or"
                                " give --attn-baselines-dir another folder")
    if options.add and not path.is_file():
        raise pytest.UsageError(f"{flag}: no baseline at {path} to add a repeat to; record one first with"
                                " --attn-save-baseline")


def _baselines_dir(folder: Path, given: bool, save: bool) -> None:
    """The baselines folder at start-up: a file there is an error; a folder named with --attn-baselines-dir
    that does not exist is one too -- a typo would turn the gate off with exit status 0 -- unless this run
    records the first baseline in it (--attn-save-baseline creates it; nothing else does)."""
    flag = f"--attn-baselines-dir={folder}"
    if folder.exists() and not folder.is_dir():
        raise pytest.UsageError(f"{flag}: that is a file, not a folder of baselines; give the folder that holds"
                                " <device-key>/baseline.json (default: baselines)")
    if given and not folder.exists() and not save:
        near = sorted(p.name for p in folder.parent.iterdir() if p.is_dir()) if folder.parent.is_dir() else []
        hint = f" (folders there: {', '.join(near[:8])})" if near else ""
        raise pytest.UsageError(f"{flag}: no such folder{hint}. Check the path; to record the first baseline"
                                " there, run with --attn-save-baseline, which creates it")


def timer_pins(config: pytest.Config) -> dict[str, TimerPin]:
    """Each case's timer, calls per sample and input sets, by test id, from the baseline this run is gated
    against or adds a repeat to (none when it records a new one, or has no baseline): a gated case is measured
    as its baseline was, so the gate compares like with like. Read once, at the first case."""
    pins = config.stash.get(TIMER_PINS, None)
    if pins is not None:
        return pins
    attn = attn_session(config)
    options, base = attn.gate, None
    if options.baseline == "off" or options.save:
        base = None
    elif options.baseline != "auto":
        base = config.stash.get(GIVEN_BASELINE, None)
    else:
        fp = fingerprint_of(attn.device, attn.clock_lock, config.stash.get(CPU_THREADS, None))
        base = _stored(config, baseline_path(options.baselines_dir, fp.key))
    pins = config.stash[TIMER_PINS] = {b.name: b.pin for b in benches(base).values() if b.pin} if base else {}
    if pins:
        attn.results.note(f"timers pinned by the baseline: each of its {len(pins)} cases measured with the timer and"
                          " calls per sample its record names (the gate compares like with like)")
    return pins


def gate_session(session: pytest.Session) -> None:
    """Before pytest-benchmark saves, after the peers are known (:mod:`.finish`): the gate, the baseline and the
    reports come from the session's records alone, so a failed save of pytest-benchmark's (a full disk) cannot
    cost them."""
    config = session.config
    attn = config.stash.get(ATTN_SESSION, None)
    if attn is None or not attn.results.records or hasattr(config, "workerinput"):  # a worker: the controller gates
        return
    if attn.options.ab is not None:
        return  # (an A/B run judges B against A: plugin.ab)
    options = attn.gate
    saving = options.save or options.add
    if options.baseline == "off" and not saving and options.report is None:
        return
    lines = config.stash[GATE_LINES]
    partial = cut_short(config)
    if partial:  # the headline of a run cut short says so, and never "no regression"
        lines.append(f"{partial}: the verdicts below are of the cases measured before the cut")
    groups = by_device(attn.results.records, config.stash.get(CPU_THREADS, None), attn.libraries)
    statuses = []
    for fp, records in groups.values():
        if len(groups) > 1:
            lines.append(f"{fp.device} ({len(records)} results):")
        if saving:
            lines += _save(session, attn, fp, records)
        if saving or options.baseline == "off":  # no verdicts; the report still has the figures, every result NEW
            if options.report is not None:
                outcome = gate(records, {"benchmarks": []}, "none", fp, options.thresholds, options.fail_on)
                statuses.append("pass" if _reports(attn, records, outcome, "none", lines) else "error")
        else:
            statuses.append(_gate_one(config, attn, fp, records, lines))
    if "error" in statuses:
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
    elif "fail" in statuses and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _gate_one(config: pytest.Config, attn: AttnSession, fp: Fingerprint, records: list[Record],
              lines: list[str]) -> str:
    """Gate one device model's results; returns "pass", "fail", "error" or "none" (no baseline)."""
    options = attn.gate
    base, name, missing = baseline_for(config, options.baseline, options.baselines_dir, fp)
    if missing and options.dir_given and not missing.startswith("error:"):
        missing = (f"error: --attn-baselines-dir={options.baselines_dir} holds no baseline for {fp.device}"
                   f" ({baseline_path(options.baselines_dir, fp.key)}): nothing was compared. Record one with"
                   " --attn-save-baseline, or name the folder that holds it")
    if missing:
        lines.append(missing)
        if missing.startswith("error:"):
            return "error"
        if options.report is None:
            return "none"
        base, name = {"benchmarks": []}, "none"  # a report still has the figures: every result NEW
    assert base is not None
    outcome = gate(records, base, name, fp, options.thresholds, options.fail_on,
                   named=options.baseline != "auto" or options.dir_given, width=terminal_width(config),
                   selection=selection_of(config, attn))
    lines += outcome.lines
    looked = config.stash.get(SECOND_LOOKED, None)
    if looked:  # said in the terminal and in summary.md (the pull request's comment) alike
        lines.append(after_line(looked, outcome.comparisons))
        outcome.notes.append(lines[-1])
    if not _reports(attn, records, outcome, name, lines):
        return "error"
    return outcome.status


def baseline_for(config: pytest.Config, given: str, folder: Path,
                  fp: Fingerprint) -> tuple[dict[str, Any] | None, str, str]:
    """(the baseline, its name, why there is none): the given one, or the one stored for the device."""
    if given != "auto":
        return config.stash[GIVEN_BASELINE], given, ""
    path = baseline_path(folder, fp.key)
    if not path.exists():
        return None, "none", (f"no stored baseline for {fp.device} ({path}); record one with --attn-save-baseline:"
                              " every result is NEW")
    held = config.stash.get(STORED_BASELINES, {}).get(path)  # read at start-up (:func:`stored_at_start`)
    try:
        return held if held is not None else load_baseline(path), str(path), ""
    except BaselineError as exc:
        return None, str(path), f"error: {in_this_run(str(exc), config)}"


def _stored(config: pytest.Config, path: Path) -> dict[str, Any] | None:
    """The baseline stored at ``path`` as read at start-up, else read now; None where there is none or it
    cannot be read (the gate says so at the end, naming the file)."""
    held = config.stash.get(STORED_BASELINES, {}).get(path)
    if held is not None:
        return held
    try:
        return load_baseline(path) if path.is_file() else None
    except BaselineError:
        return None


def _save(session: pytest.Session, attn: AttnSession, fp: Fingerprint, records: list[Record]) -> list[str]:
    flag = "--attn-add-to-baseline" if attn.gate.add else "--attn-save-baseline"
    if session.exitstatus == pytest.ExitCode.INTERRUPTED:
        return [f"{flag}: nothing saved: the run was interrupted ({len(records)} cases measured)"]
    path = baseline_path(attn.gate.baselines_dir, fp.key)
    try:
        return [save_baseline(path, run_json(records, session.config), fp, force=attn.gate.force, add=attn.gate.add)]
    except BaselineError as exc:
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return [f"error: {flag}: {in_this_run(str(exc), session.config)}"]
    except OSError as exc:  # its folder or lock file cannot be made (a read-only mount): said, and the run saves on
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return [f"error: {flag}: nothing saved: cannot write {exc.filename or path.parent} ({exc.strerror or exc});"
                " the baseline there is as it was, and the run's own JSON is saved as asked. Give"
                " --attn-baselines-dir a folder you can write to and rerun"]


def _reports(attn: AttnSession, records: list[Record], outcome: Outcome, name: str, lines: list[str]) -> bool:
    """``--attn-report`` files and the job summary, when a baseline was compared; False when one could not
    be written (each file is whole or absent: see :mod:`pytest_attn.core.files`)."""
    if not outcome.comparisons and outcome.status == "error":
        return True
    fail_on, partial = attn.gate.fail_on, cut_short(attn.config)
    try:
        if attn.gate.report is not None:
            for written in write_reports(attn.gate.report, outcome.comparisons, name, records, outcome.notes,
                                         fail_on, partial):
                lines.append(f"  {written}")
        append_job_summary(markdown(outcome.comparisons, name, outcome.notes, fail_on, partial))
    except OSError as exc:
        lines.append(f"error: writing the report failed: {exc.strerror or exc} ({exc.filename or 'a report file'});"
                     " the verdicts above stand. Free space there (or give --attn-report another folder) and rerun")
        return False
    return True


def cut_short(config: pytest.Config) -> str | None:
    """How this run was cut short, in a headline's words ("interrupted after 12 of 40 cases: partial"), or None."""
    mark = config.stash.get(PARTIAL, None)
    return partial_headline({"attn_partial": mark}) if mark is not None else None


def append_job_summary(markdown_text: str) -> None:
    """Append to the GitHub Actions job summary, where the job keeps one (``$GITHUB_STEP_SUMMARY``)."""
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_file:
        with open(summary_file, "a") as fh:
            fh.write(markdown_text)


def write_section(terminalreporter: Any, title: str, lines: list[str]) -> None:
    """A titled section of the terminal summary, where there are lines, wrapped to the terminal's width."""
    if lines:
        terminalreporter.write_sep("=", title)
        for line in wrap(lines, terminal_width(terminalreporter.config)):
            terminalreporter.write_line(line)


def gate_section(terminalreporter: Any, config: pytest.Config) -> None:
    write_section(terminalreporter, "pytest-attn gate", config.stash.get(GATE_LINES, []))
