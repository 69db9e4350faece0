"""The end-of-session summary of an attention run: the run's lines (profile, back ends, ceilings, the compile
phase, where the time went), the table of every problem's back ends, the skips counted, the notes -- or, for a
run that measured no case, one line that says why (:func:`nothing_measured`)."""

from __future__ import annotations

from typing import Any

import pytest

from ..engine.probe import uncompiled_bytecode
from ..verdicts.layout import wrap
from ..verdicts.rule import Comparison, Noise, compare
from ..verdicts.runs import benches, by_name
from ..verdicts.table import TimeCaps, render, time_lines
from ..verdicts.workload_view import workload_lines
from .nothing_selected import why_none_selected
from .session import (
    ATTENTION_RUN,
    ATTENTION_WHY,
    ATTN_SESSION,
    COMPARED,
    CPU_THREADS,
    SELECTED,
    STORED_BASELINES,
    AttnSession,
    case_of_item,
    terminal_width,
    timing_disabled,
)
from .workers import busy_lines, cases_selected, cut_short

NOTHING_MEASURED = pytest.StashKey[str]()


def nothing_measured(session: pytest.Session, attn: AttnSession) -> None:
    """An attention run that measured no case says so in one line, with why (every case's skip reason,
    counted; or no case selected); where the run was asked to save a baseline, gate, compare or pair arms, it
    fails (exit status 4): in CI a green job that measured nothing is a gate switched off."""
    config = session.config
    # (the controller of pytest-xdist workers collects nothing: its workers said what they collected)
    selected = sum(1 for item in session.items if case_of_item(item) is not None) or cases_selected(config) or 0
    stopped = (pytest.ExitCode.INTERRUPTED, pytest.ExitCode.USAGE_ERROR)  # (a usage error stopped it at start-up)
    if attn.results.records or not (attn.active or selected) or session.exitstatus in stopped:
        return
    if config.option.collectonly or attn.options.compile_only or timing_disabled(config):
        return
    asked = _needs_a_measured_case(config, attn) + _gated_by_stored(config, attn)
    uses = [set(getattr(item, "fixturenames", ())) for item in session.items]
    if not asked and any("attn_fuzzer" in u for u in uses) and not any("attn_bench" in u for u in uses):
        return  # a fuzz run: it checks kernels, it was never to measure one
    counted: dict[str, int] = {}
    for reason in attn.results.skips:
        counted[reason] = counted.get(reason, 0) + 1
    why = "; ".join(f"{n} x {r}" for r, n in sorted(counted.items(), key=lambda kv: -kv[1])[:4])
    more = f"; and {len(counted) - 4} more reasons (pytest -rs lists them)" if len(counted) > 4 else ""
    failed = selected - len(attn.results.skips)
    how = f"{len(attn.results.skips)} skipped ({why}{more})" if attn.results.skips else ""
    how = ", ".join(filter(None, [how, f"{failed} failed (above)" if failed > 0 else ""]))
    why_none = None if selected else why_none_selected(config, attn)
    line = (f"measured nothing: of the {selected} attention case(s) selected, {how}" if selected
            else f"measured nothing: no attention case was selected: {why_none}" if why_none
            else "measured nothing: no attention case was selected (the profile's cases, narrowed by --attn-dtypes,"
                 " --attn-directions, --attn-backends, --attn-case or -k, left none for these tests)")
    short = cut_short(config)
    if short:
        line = f"measured nothing: {short}"
    if asked:
        line = f"error: {line}; the run was asked for {', '.join(asked)}, which needs a measured case"
        if session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.USAGE_ERROR
    config.stash[NOTHING_MEASURED] = line


def _gated_by_stored(config: pytest.Config, attn: AttnSession) -> list[str]:
    """The stored baselines (read at start-up) that hold cases this run selected: a gate that would have
    compared them -- a run whose every selected case was skipped (a back end whose import broke) must not pass
    it by measuring nothing."""
    if attn.gate.add or attn.gate.dir_given:
        return []  # (asked for by name: see below)
    selected = config.stash.get(SELECTED, set())
    return [f"the gate against {path} (it holds {n} of the cases selected)"
            for path, base in config.stash.get(STORED_BASELINES, {}).items()
            if (n := len(selected & set(benches(base))))]


def _needs_a_measured_case(config: pytest.Config, attn: AttnSession) -> list[str]:
    """The options of this run that ask for something a run without a measured case cannot do."""
    gate = attn.gate
    return [flag for flag, on in (
        ("--attn-save-baseline", gate.save), ("--attn-add-to-baseline", gate.add),
        ("--attn-baseline", gate.baseline not in ("auto", "off")),
        ("--attn-baselines-dir", gate.dir_given and gate.baseline == "auto"),
        ("--benchmark-compare", bool(config.getoption("benchmark_compare", None))),
        ("--attn-ab", attn.options.ab is not None)) if on]


@pytest.hookimpl(wrapper=True)
def pytest_report_header(config: pytest.Config) -> Any:
    """In an attention run, the header lines that plugins give (pytest-benchmark's defaults line is 176
    characters) wrapped to the terminal's width."""
    lines = yield
    if not config.stash.get(ATTENTION_RUN, False):
        return lines
    width = terminal_width(config)
    return [wrap([x], width) if isinstance(x, str) else wrap(list(x), width) for x in lines]


def run_line(config: pytest.Config, session: AttnSession) -> str:
    """What the run was: the profile, the back ends that ran (the others counted, not listed: most cannot run
    on every machine), torch's CPU threads, and why the plugin treated the session as an attention run."""
    ran = sorted({r.case.backend for r in session.results.records}, key=session.backends.index)
    failed = [b for b in session.backends if b in session.results.failures and b not in ran]
    others = len(session.backends) - len(ran) - len(failed)
    said = [f"{others} more selected did not run here: pytest -rs says why"] if others else []
    if failed:  # a failure is not a skip: -rs says nothing of it
        said.append(f"{', '.join(failed)} measured nothing and failed: the failures above say why, and pytest -rf"
                    " lists them")
    more = f" ({'; '.join(said)})" if said else ""
    threads = config.stash.get(CPU_THREADS, "torch's default")
    why = config.stash.get(ATTENTION_WHY, "")
    return (f"profile: {session.profile}; back ends that ran: {', '.join(ran) or 'none'}{more}; torch CPU threads:"
            f" {threads}" + (f"; an attention run because {why}" if why else ""))


def _compared(config: pytest.Config, session: AttnSession) -> tuple[str, list[Comparison]] | None:
    """``--benchmark-compare``: each case of this run against the saved run pytest-benchmark compares with (the
    last it loaded), by the gate's rule -- like with like, both runs' noise, and the noise the gate assumes for
    this device (on a CPU 5 % a run, not a GPU's 1 %) -- for the table's "vs saved"."""
    loaded = config.stash.get(COMPARED, [])
    if not loaded or not session.results.records:
        return None
    name, run = loaded[-1]
    mine, saved = by_name(session.results.records), benches(run)
    cpu = not any(r.device.is_cuda for r in session.results.records)  # the noise the gate assumes for this device
    return name, [c for c in compare(saved, mine, session.gate.thresholds, Noise.of(saved, mine, cpu=cpu))
                  if c.name in mine]


def summary_section(terminalreporter: Any, config: pytest.Config) -> None:
    session = config.stash.get(ATTN_SESSION, None)
    nothing = config.stash.get(NOTHING_MEASURED, "")
    width = terminal_width(config)
    if nothing:
        terminalreporter.write_sep("=", "pytest-attn summary")
        for line in wrap([nothing, *busy_lines(config)], width):
            terminalreporter.write_line(line)
        return
    if session is None or not (session.results.records or session.results.skips or session.compiled.builds):
        return
    terminalreporter.write_sep("=", "pytest-attn summary")
    devices = list({r.device.uuid or r.device.name: r.device for r in session.results.records}.values())
    device = session.device_if_probed or (devices[0] if devices else None)
    caps = TimeCaps(cpu=device is not None and not device.is_cuda, target=session.options.precision,
                    every=config.get_verbosity() > 0)
    lines = render(session.results.records, device, session.results.skips, session.options.speedup_vs, width,
                   _compared(config, session), time_caps=caps)
    if len(devices) > 1:
        lines.insert(0, "measured on " + "; ".join(f"GPU {d.host_index}: {d.name} ({d.uuid})" if d.is_cuda
                                                   else d.describe() for d in devices))
    lines.insert(0, run_line(config, session))
    measured = sum(r.timing.elapsed_s + (r.sustained.phase_s if r.sustained else 0.0) for r in session.results.records)
    wall = session.wall.line(measured)
    slow_start = uncompiled_bytecode() if wall else None
    lines[1:1] = [*session.ceilings.lines(), *session.compiled.lines(), *time_lines(session.results.records),
                  *([wall] if wall else []), *([slow_start] if slow_start else []), *busy_lines(config)]
    lines.extend(workload_lines(session.options.workloads, session.results.records))
    lines.extend(f"note: {n}" for n in session.results.notes)
    for line in wrap(lines, width):
        terminalreporter.write_line(line)
