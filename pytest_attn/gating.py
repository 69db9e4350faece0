"""pytest wiring of GPU-keyed storage, stored baselines, the regression gate and reports.

* Local history: on a GPU, pytest-benchmark's storage becomes ``.benchmarks/<gpu-key>/`` (unless
  ``--benchmark-storage`` is given), so ``--benchmark-compare`` never compares runs of two GPUs.
* Gate: when a baseline is stored for this GPU (``baselines/<gpu-key>/baseline.json``) or given with
  ``--attn-baseline=PATH``, every result gets a verdict (see :mod:`pytest_attn.gate`) and any SLOWER
  makes the exit status non-zero.
* ``--attn-save-baseline`` stores this run as the GPU's baseline (see :mod:`pytest_attn.baseline`).
* ``--attn-report=DIR`` writes summary.md, results.csv and plots; with ``$GITHUB_STEP_SUMMARY`` set
  the Markdown is appended there too.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest

from .baseline import BaselineError, as_written, baseline_path, load_baseline, save_baseline, stored_fingerprint
from .fingerprint import differences, fingerprint_of, gpu_key, visible_gpu_name
from .gate import DEFAULT_THRESHOLD, Thresholds, compare, parse_fraction, parse_override, regressions
from .reports import markdown, terminal_lines, write_reports

DEFAULT_STORAGE = "file://./.benchmarks"


@dataclass
class GateState:
    thresholds: Thresholds
    baseline: str  # "auto", "off" or a path
    baselines_dir: Path
    save: bool
    force: bool
    report: Path | None
    gpu_key: str | None
    run: dict[str, Any] | None = None
    lines: list[str] = field(default_factory=list)


GATE = pytest.StashKey[GateState]()


class JsonSink(os.PathLike[str]):
    """A ``--benchmark-json`` target that every pytest-benchmark takes: 5.3 opens the option's path
    (``open(path, "wb")``), 5.2 gets an open file from argparse and writes in ``with option as fh``
    (seen on the GPU machine: a plain Path failed there with "'PosixPath' object has no attribute
    'write'")."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._fh: Any = None

    def __fspath__(self) -> str:
        return str(self.path)

    def __enter__(self) -> Any:
        self._fh = open(self.path, "wb")  # closed in __exit__
        return self._fh

    def __exit__(self, *exc: object) -> None:
        self._fh.close()

    def __str__(self) -> str:
        return str(self.path)


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("attn")
    group.addoption("--attn-baseline", default="auto", metavar="PATH|auto|off",
                    help="baseline to gate against: auto = baselines/<gpu-key>/baseline.json when it exists (default)")
    group.addoption("--attn-baselines-dir", default="baselines", metavar="DIR",
                    help="folder of per-GPU baselines, relative to the rootdir (default: baselines)")
    group.addoption("--attn-threshold", default=f"{DEFAULT_THRESHOLD:.0%}", metavar="PCT",
                    help="a change must exceed this (and both runs' noise) to be SLOWER/FASTER (default 5%%)")
    group.addoption("--attn-threshold-for", action="append", default=[], metavar="KIND:NAME=PCT",
                    help="per back end or group: backend:flex=10%% or group:NAME=3%% (repeatable)")
    group.addoption("--attn-save-baseline", action="store_true", default=False,
                    help="store this run as the baseline for this GPU (baselines/<gpu-key>/baseline.json)")
    group.addoption("--attn-force", action="store_true", default=False,
                    help="with --attn-save-baseline: replace a baseline recorded on another GPU, or a corrupt one")
    group.addoption("--attn-report", default=None, metavar="DIR",
                    help="write summary.md, results.csv and plots (TFLOP/s vs length, roofline) into DIR")


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    try:
        default = parse_fraction(config.getoption("attn_threshold"))
        overrides = [parse_override(t) for t in config.getoption("attn_threshold_for")]
    except ValueError as exc:
        raise pytest.UsageError(str(exc)) from None
    name = visible_gpu_name()
    key = gpu_key(name) if name else None
    if key and config.getoption("benchmark_storage", DEFAULT_STORAGE) == DEFAULT_STORAGE:
        config.option.benchmark_storage = f"{DEFAULT_STORAGE}/{key}"
    report = config.getoption("attn_report")
    wants_run = (config.getoption("attn_save_baseline") or report
                 or config.getoption("attn_baseline") not in ("auto", "off") or (key and config.getoption(
                     "attn_baseline") == "auto"))
    if wants_run and not config.getoption("benchmark_json", None) and not config.getoption("benchmark_autosave", None):
        # pytest-benchmark hands its JSON to pytest_benchmark_update_json only when it writes one
        import tempfile

        config.option.benchmark_json = JsonSink(Path(tempfile.mkdtemp(prefix="pytest-attn-")) / "run.json")
    config.stash[GATE] = GateState(
        thresholds=Thresholds.build(default, overrides),
        baseline=config.getoption("attn_baseline"),
        baselines_dir=config.rootpath / config.getoption("attn_baselines_dir"),
        save=config.getoption("attn_save_baseline"),
        force=config.getoption("attn_force"),
        report=Path(report) if report else None,
        gpu_key=key,
    )


@pytest.hookimpl(optionalhook=True)
def pytest_benchmark_update_json(config: pytest.Config, benchmarks: Any, output_json: dict[str, Any]) -> None:
    """pytest-benchmark hands over the run it is about to save: keep it for the gate, as the JSON that
    pytest-benchmark writes (test parameters such as a case object become their text)."""
    state = config.stash.get(GATE, None)
    if state is not None:
        state.run = as_written(output_json)


def _device(config: pytest.Config) -> Any:
    from .plugin import ATTN_SESSION

    session = config.stash.get(ATTN_SESSION, None)
    return session.device_if_probed if session is not None else None


def _fingerprint(config: pytest.Config, device: Any) -> Any:
    from .plugin import ATTN_SESSION

    session = config.stash.get(ATTN_SESSION, None)
    return fingerprint_of(device, session.clock_lock if session is not None else "not locked")


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    state = session.config.stash.get(GATE, None)
    if state is None:
        return
    device = _device(session.config)
    if state.save:
        if state.run is None or device is None or not device.is_cuda:
            state.lines.append("--attn-save-baseline: nothing saved (no GPU results in this run)")
            return
        fp = _fingerprint(session.config, device)
        try:
            state.lines.append(save_baseline(baseline_path(state.baselines_dir, fp.key), state.run, fp,
                                             force=state.force))
        except BaselineError as exc:
            state.lines.append(f"error: {exc}")
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return
    if state.baseline == "off" or state.run is None:
        return
    if state.baseline == "auto":
        if device is None or not device.is_cuda:
            return
        path = baseline_path(state.baselines_dir, fingerprint_of(device).key)
        if not path.exists():
            state.lines.append(f"no stored baseline for this GPU ({path}); record one with --attn-save-baseline")
            if state.report is not None:  # every result NEW: the report still has the figures
                _finish(session, state, {"benchmarks": []}, "none", [])
            return
    else:
        path = Path(state.baseline)
    _gate(session, state, path, device)


def _gate(session: pytest.Session, state: GateState, path: Path, device: Any) -> None:
    try:
        base = load_baseline(path)
    except BaselineError as exc:
        state.lines.append(f"error: {exc}")
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
        return
    notes: list[str] = []
    stored = stored_fingerprint(base)
    if stored is not None and device is not None and device.is_cuda:
        blocking, informing = differences(stored, _fingerprint(session.config, device))
        if blocking:
            state.lines.append(f"error: baseline {path} was recorded on another GPU ({'; '.join(blocking)}): not"
                               " compared. Record one for this GPU with --attn-save-baseline")
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
            return
        notes = [f"differs from the baseline: {d}" for d in informing]
    elif stored is None:
        notes.append(f"baseline {path} has no fingerprint: it cannot be checked to be from this GPU")
    _finish(session, state, base, str(path), notes)


def _finish(session: pytest.Session, state: GateState, base: dict[str, Any], name: str, notes: list[str]) -> None:
    """Verdicts, reports, the step summary and the exit status."""
    assert state.run is not None
    comparisons = compare(base, state.run, state.thresholds)
    state.lines.extend(terminal_lines(comparisons, name, notes))
    if state.report is not None:
        for written in write_reports(state.report, comparisons, name, state.run, notes):
            state.lines.append(f"  {written}" if " skipped" in written else f"  wrote {written}")
    summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary_file:
        with open(summary_file, "a") as fh:
            fh.write(markdown(comparisons, name, notes))
    if regressions(comparisons):
        session.exitstatus = pytest.ExitCode.TESTS_FAILED


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    state = config.stash.get(GATE, None)
    if state is not None and state.lines:
        terminalreporter.write_sep("=", "pytest-attn gate")
        for line in state.lines:
            terminalreporter.write_line(line)
