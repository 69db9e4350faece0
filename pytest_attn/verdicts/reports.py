"""Reports of a gated run: a verdict table for the terminal, Markdown (pull-request comment,
``$GITHUB_STEP_SUMMARY``), CSV, and plots (matplotlib, optional). Pure except the writers."""

from __future__ import annotations

import csv
import io
from collections.abc import Sequence
from pathlib import Path

from ..core.record import Record
from .gate import Comparison
from .plots import write_plots
from .table import fmt_time

HEADER = ("benchmark", "baseline", "current", "change", "verdict", "TFLOP/s", "MFU")


def _row(c: Comparison) -> tuple[str, ...]:
    e = c.entry
    return (
        c.name.split("::")[-1],
        fmt_time(c.baseline.median_s) if c.baseline else "-",
        fmt_time(c.current.median_s) if c.current else "-",
        f"{c.change * 100:+.1f}%" if c.change is not None else "-",
        c.verdict,
        f"{e.tflops:.1f}" if isinstance(e.tflops, (int, float)) else "n/a",
        f"{e.mfu * 100:.1f}%" if isinstance(e.mfu, (int, float)) else "n/a",
    )


def counts(comparisons: Sequence[Comparison]) -> str:
    found: dict[str, int] = {}
    for c in comparisons:
        found[c.verdict] = found.get(c.verdict, 0) + 1
    return ", ".join(f"{n} {v}" for v, n in found.items()) or "nothing to compare"


def terminal_lines(comparisons: Sequence[Comparison], baseline: str, notes: Sequence[str] = ()) -> list[str]:
    rows = [HEADER, *(_row(c) for c in comparisons)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    lines = [f"against {baseline}: {counts(comparisons)}"]
    lines += ["  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                                enumerate(zip(r, widths, strict=True))) for r in rows]
    for c in comparisons:
        if c.verdict not in ("SLOWER", "FASTER") or c.change is None or c.noise is None or c.threshold is None:
            continue
        lines.append(f"  {c.verdict.lower()}: {c.name.split('::')[-1]} moved {c.change * 100:+.1f}% (threshold"
                     f" {c.threshold * 100:.1f}%, noise of both runs {c.noise * 100:.1f}%)")
    lines += [f"  note: {n}" for n in notes]
    return lines


def markdown(comparisons: Sequence[Comparison], baseline: str, notes: Sequence[str] = ()) -> str:
    out = io.StringIO()
    slower = sum(c.verdict == "SLOWER" for c in comparisons)
    out.write(f"### pytest-attn: {'regression' if slower else 'no regression'} ({counts(comparisons)})\n\n")
    out.write(f"Baseline: `{baseline}`\n\n")
    out.write("| " + " | ".join(HEADER) + " |\n|" + "---|" * len(HEADER) + "\n")
    for c in comparisons:
        cells = list(_row(c))
        cells[0] = f"`{cells[0]}`"
        if c.verdict == "SLOWER":
            cells[4] = "**SLOWER**"
        out.write("| " + " | ".join(cells) + " |\n")
    for n in notes:
        out.write(f"\n> {n}\n")
    return out.getvalue()


def csv_text(comparisons: Sequence[Comparison]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["benchmark", "group", "backend", "baseline_s", "current_s", "change", "verdict", "threshold",
                     "noise", "tflops", "mfu"])
    for c in comparisons:
        e = c.entry
        writer.writerow([c.name, e.group, e.backend, c.baseline.median_s if c.baseline else "",
                         c.current.median_s if c.current else "", "" if c.change is None else f"{c.change:.6f}",
                         c.verdict, "" if c.threshold is None else c.threshold, "" if c.noise is None else c.noise,
                         "" if e.tflops is None else e.tflops, "" if e.mfu is None else e.mfu])
    return out.getvalue()


def write_reports(folder: Path, comparisons: Sequence[Comparison], baseline: str, records: Sequence[Record],
                  notes: Sequence[str] = ()) -> list[str]:
    """Write summary.md, results.csv and the plots of ``records`` into ``folder``; returns what was
    written (or why a plot was not)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "summary.md").write_text(markdown(comparisons, baseline, notes))
    (folder / "results.csv").write_text(csv_text(comparisons))
    written = [str(folder / "summary.md"), str(folder / "results.csv")]
    written += write_plots(folder, records)
    return written
