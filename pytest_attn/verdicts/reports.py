"""Reports of a gated run: a verdict table for the terminal, Markdown (pull-request comment,
``$GITHUB_STEP_SUMMARY``), CSV, and plots (matplotlib, optional). Pure except the writers."""

from __future__ import annotations

import io
from collections.abc import Sequence
from pathlib import Path

from ..core.record import Record
from .layout import fit_table, printable
from .plots import write_plots
from .render import csv_rows, explained, markdown_table, md_cell, md_code, md_text, verdict_counts, write_files
from .rule import Comparison
from .selection import counted_files
from .table import fmt_time, sustained_lines
from .verdict import DEFAULT_FAIL_ON, Verdict

HEADER = ("benchmark", "baseline", "current", "change", "noise", "cycles", "verdict", "TFLOP/s", "MFU")
EXPLAINED = ("SLOWER", "FASTER", "AMBIGUOUS", "CLOCK")


def _short(name: str) -> str:
    """A benchmark's name without its test file (``test_prefill[fa4-...]``), as text (:func:`~.layout.printable`)."""
    return printable(name.split("::")[-1])


def _row(c: Comparison) -> tuple[str, ...]:
    e = c.entry
    return (
        _short(c.name),
        fmt_time(c.baseline.median_s) if c.baseline else "-",
        fmt_time(c.current.median_s) if c.current else "-",
        f"{c.change * 100:+.1f}%" if c.change is not None else "-",
        f"+-{c.noise * 100:.1f}%" if c.noise is not None else "-",
        f"{c.cycles_change * 100:+.1f}%" if c.cycles_change is not None else "-",
        c.verdict,
        f"{e.tflops:.1f}" if isinstance(e.tflops, (int, float)) else "n/a",
        f"{e.mfu * 100:.1f}%" if isinstance(e.mfu, (int, float)) else "n/a",
    )


def counts(comparisons: Sequence[Comparison]) -> str:
    return verdict_counts((c.verdict for c in comparisons), "nothing to compare")


def headline(comparisons: Sequence[Comparison], fail_on: Sequence[str] = DEFAULT_FAIL_ON,
             partial: str | None = None) -> str:
    """The gate's outcome in a few words: a regression, another failing verdict, or none -- and "no regression"
    only where cases were compared and none failed (:func:`no_failure`), never for a run cut short (``partial``:
    how, in the words of :func:`~.runs.partial_headline`, which then leads the headline)."""
    if partial:
        said = headline(comparisons, fail_on)
        return partial if said.startswith("no regression") else f"{partial}; {said}"
    failing = [c for c in comparisons if c.verdict in fail_on]
    if any(c.verdict == "SLOWER" for c in failing):
        return "regression"
    if failing:
        return f"failed on {counts(failing)}"
    return no_failure(comparisons)


def no_failure(comparisons: Sequence[Comparison]) -> str:
    """The headline of a gate that failed on nothing: "not gated" where nothing was compared (no baseline, or
    no case in common); else how many of the baseline's cases were decided, and -- never hidden behind a "no
    regression" -- how many were AMBIGUOUS (not a pass to trust) and not compared."""
    decided = sum(Verdict(c.verdict).decided for c in comparisons)
    ambiguous = sum(c.verdict == Verdict.AMBIGUOUS for c in comparisons)
    uncompared = [c for c in comparisons if Verdict(c.verdict).uncompared]
    if not any(c.baseline is not None for c in comparisons):
        return "not gated: no baseline"
    if not decided and not ambiguous:
        return f"not gated: nothing compared ({counts(uncompared)})" if uncompared else "not gated: nothing compared"
    of = decided + ambiguous + len(uncompared)
    said = [f"{ambiguous} AMBIGUOUS: not a pass you can trust"] if ambiguous else []
    said += [f"{counts(uncompared)} not compared"] if uncompared else []
    head = f"no regression in {decided} of {of} cases" if decided else f"no verdict on any of {of} cases"
    return "; ".join([head, *said])


TERMINAL_HEADER = ("benchmark", "baseline", "current", "change", "noise", "cycles", "verdict")


def _on_gpu(comparisons: Sequence[Comparison]) -> bool:
    """Any of the runs compared was measured on a GPU (a CPU has no clocks to lock: advice says so only there)."""
    return any(b.record is not None and b.record.device.is_cuda
               for c in comparisons for b in (c.current, c.baseline) if b is not None)


def _remedies(gpu: bool) -> str:
    return ("add repeats to the baseline (--attn-add-to-baseline), sample longer (--attn-max-time)"
            + (", lock the clocks (--attn-lock-clocks), or run it again and gate both runs as one"
               " (pytest-attn merge --reruns FIRST.json AGAIN.json)" if gpu else " or keep the machine otherwise idle"))


def legend(gpu: bool) -> str:
    return (f"SLOWER / FASTER: {Verdict.SLOWER.meaning}; SAME: {Verdict.SAME.meaning}; AMBIGUOUS: neither --"
            f" {_remedies(gpu)}")


def unselected_line(comparisons: Sequence[Comparison]) -> str:
    """The baseline's cases this run did not select, in one line (counted per test file), not a row each."""
    left = counted_files(c.name for c in comparisons if c.verdict == "UNSELECTED")
    if not left:
        return ""
    return (f"{sum(left.values())} UNSELECTED: cases of the baseline this run did not select (another test file,"
            " -k, a back end or dtype not selected): not compared, not failed -- "
            + ", ".join(f"{printable(f)}: {n}" for f, n in left.items()))


def terminal_lines(comparisons: Sequence[Comparison], baseline: str, notes: Sequence[str] = (),
                   width: int | None = None) -> list[str]:
    """The verdicts for a terminal: a line of counts, one row per benchmark (each verdict once; the UNSELECTED
    ones counted per test file in one line), the legend, and each case's notes where it has any (CLOCK, TIMER,
    MISSING, an odd repeat, a time cap); within ``width``. Every name from a file printed as text."""
    thresholds = sorted({c.threshold for c in comparisons if c.threshold is not None})
    said = f" at a {'/'.join(f'{t:.1%}' for t in thresholds)} threshold" if thresholds else ""
    shown = [c for c in comparisons if c.verdict != "UNSELECTED"]
    rows = [TERMINAL_HEADER, *(_row(c)[:len(TERMINAL_HEADER)] for c in shown)]
    table, _ = fit_table(rows, width) if shown else ([], [])
    lines = [f"against {printable(baseline)}{said}: {counts(comparisons)}", *table]
    unselected = unselected_line(comparisons)
    lines += [f"  {unselected}"] if unselected else []
    if any(c.verdict in EXPLAINED for c in comparisons):
        lines.append(f"  {legend(_on_gpu(comparisons))}")
    lines += [f"  {_short(c.name)}: {printable('; '.join(c.notes))}" for c in shown if c.notes]
    lines += [f"  note: {printable(n)}" for n in notes]
    return lines


def explain(c: Comparison, gpu: bool = True) -> str:
    """Why a comparison got its verdict, with the numbers (``gpu``: the advice may name the clocks)."""
    parts = []
    if c.change is not None and c.noise is not None and c.threshold is not None:
        parts.append(f"moved {c.change * 100:+.1f}% against noise of +-{c.noise * 100:.1f}% (3 sigma, both runs) and a"
                     f" threshold of {c.threshold * 100:.1f}%")
        if c.verdict == "AMBIGUOUS" and c.in_time == "AMBIGUOUS":  # (else the clock made it so: a note says)
            parts.append(f"the noise cannot tell a change of the threshold from none: {_remedies(gpu)}")
    return "; ".join([*parts, *c.notes])


def markdown(comparisons: Sequence[Comparison], baseline: str, notes: Sequence[str] = (),
             fail_on: Sequence[str] = DEFAULT_FAIL_ON, partial: str | None = None) -> str:
    """The report for a pull-request comment or the job summary: the headline (:func:`headline`), a row per case
    (the UNSELECTED ones in one line), the cases explained, the notes. Every name from a file escaped for
    Markdown: a code span it cannot leave, a table cell it cannot split."""
    out = io.StringIO()
    out.write(f"### pytest-attn: {md_text(headline(comparisons, fail_on, partial))} ({counts(comparisons)})\n\n")
    out.write(f"Baseline: {md_code(baseline)}\n\n")
    shown = [c for c in comparisons if c.verdict != "UNSELECTED"]
    if shown:
        out.write(markdown_table(HEADER, ((_row(c), c.verdict in fail_on) for c in shown), HEADER.index("verdict")))
    unselected = unselected_line(comparisons)
    if unselected:
        out.write(f"\n{md_text(unselected)}\n")
    said = [c for c in shown if c.verdict in EXPLAINED or c.notes]
    if said:
        out.write("\n")
    gpu = _on_gpu(comparisons)
    out.write(explained((c.name.split("::")[-1], c.verdict, explain(c, gpu)) for c in said))
    for n in notes:
        out.write(f"\n> {md_text(n)}\n")
    return out.getvalue()


def csv_text(comparisons: Sequence[Comparison]) -> str:
    return csv_rows(["benchmark", "group", "backend", "baseline_s", "current_s", "change", "verdict", "threshold",
                     "noise", "cycles_change", "tflops", "mfu", *SUSTAINED_CSV, "notes"], map(_csv_row, comparisons))


def _csv_row(c: Comparison) -> list[object]:
    e = c.entry
    return [c.name, e.group, e.backend, c.baseline.median_s if c.baseline else "",
            c.current.median_s if c.current else "", "" if c.change is None else f"{c.change:.6f}",
            c.verdict, "" if c.threshold is None else c.threshold, "" if c.noise is None else c.noise,
            "" if c.cycles_change is None else f"{c.cycles_change:.6f}",
            "" if e.tflops is None else e.tflops, "" if e.mfu is None else e.mfu,
            *_sustained_csv(c.current.record if c.current else None), "; ".join(c.notes)]


#: The sustained figures (``--attn-sustained``) in results.csv: empty where a case has none.
SUSTAINED_CSV = ("sustained_s", "sustained_sm_clock_mhz", "sustained_power_w", "energy_per_call_j", "tflops_per_j",
                 "sustained_settled")


def _sustained_csv(record: Record | None) -> list[object]:
    s = record.sustained if record is not None else None
    if s is None:
        return [""] * len(SUSTAINED_CSV)
    return [s.median_s, "" if s.sm_clock_mhz is None else s.sm_clock_mhz, "" if s.power_w is None else s.power_w,
            "" if s.energy_per_call_j is None else s.energy_per_call_j,
            "" if s.tflops_per_j is None else s.tflops_per_j, s.settled]


def sustained_markdown(records: Sequence[Record]) -> str:
    """A section of the report for the cases measured under sustained load: burst and sustained side by side,
    and where the order of the back ends changed."""
    loaded = [r for r in records if r.sustained is not None]
    if not loaded:
        return ""
    out = ["### Under sustained load (--attn-sustained)", "",
           "| benchmark | burst | sustained | change | SM MHz (burst, load) | W | mJ / call | TFLOP/s | TFLOP/J |",
           "|---|---|---|---|---|---|---|---|---|"]
    for r in loaded:
        s = r.sustained
        assert s is not None
        burst_clock = f"{r.clocks.sm_clock_mhz:.0f}" if r.clocks.sm_clock_mhz else "-"
        load_clock = f"{s.sm_clock_mhz:.0f}" if s.sm_clock_mhz else "-"
        out.append(f"| {md_cell(md_code(r.name.split('::')[-1]))} | {fmt_time(r.median_s)} | {fmt_time(s.median_s)}"
                   f"{'' if s.settled else ' (not settled)'} | "
                   f"{'-' if not s.burst_ratio else f'{(s.burst_ratio - 1) * 100:+.1f}%'} | {burst_clock}, {load_clock}"
                   f" | {'-' if s.power_w is None else f'{s.power_w:.0f}'} | "
                   f"{'-' if s.energy_per_call_j is None else f'{s.energy_per_call_j * 1e3:.3g}'} | {s.tflops:.1f} | "
                   f"{'-' if s.tflops_per_j is None else f'{s.tflops_per_j:.3g}'} |")
    out += ["", *(f"- {md_text(line)}" for line in sustained_lines(loaded)[1:])]
    return "\n".join(out).rstrip() + "\n"


def write_reports(folder: Path, comparisons: Sequence[Comparison], baseline: str, records: Sequence[Record],
                  notes: Sequence[str] = (), fail_on: Sequence[str] = DEFAULT_FAIL_ON,
                  partial: str | None = None) -> list[str]:
    """Write summary.md, results.csv and the plots of ``records`` into ``folder`` (each file whole, never through a
    link planted at its name); returns a line per file ("wrote PATH") or plot not drawn (why). ``partial``: how the
    run was cut short (:func:`~.runs.partial_headline`), said first in summary.md's headline."""
    loaded = sustained_markdown(records)
    text = markdown(comparisons, baseline, notes, fail_on, partial) + (f"\n{loaded}" if loaded else "")
    written = write_files(folder, {"summary.md": text, "results.csv": csv_text(comparisons)})
    return written + [w if " skipped" in w else f"wrote {w}" for w in write_plots(folder, records)]
