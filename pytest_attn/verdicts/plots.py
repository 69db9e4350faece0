"""Plots of a run's result records (matplotlib, the ``plots`` extra): throughput against sequence
length per back end, and a roofline placing each case against the GPU's compute and bandwidth
ceilings. Everything a point needs -- direction, lengths, figures, ceilings -- is read from the
record, never from a test id. Each figure is written whole, through :func:`~pytest_attn.core.files.write_atomic`
(never through a link planted at its name)."""

from __future__ import annotations

import io
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..core.files import write_atomic
from ..core.record import Record

PANELS = ("prefill (seqlen_q = seqlen_k)", "decode and chunked prefill (seqlen_q < seqlen_k)")
#: What each panel plots: prefill is compute-bound (TFLOP/s), decode memory-bound (TB/s).
PANEL_UNITS = ("TFLOP/s (exact-mask FLOPs)", "TB/s (minimal bytes: keys and values read, new tokens written)")


@dataclass(frozen=True)
class Point:
    """One result as the plots place it."""

    backend: str
    direction: str
    panel: str
    keys: int  # keys per sequence: the batch's mean (a serving batch's lengths differ)
    tflops: float
    tbps: float
    intensity: float


def points(records: Sequence[Record]) -> list[Point]:
    """A point per record, its panel chosen by the case's lengths: prefill-like cases apart from decode
    steps, whose TFLOP/s are two orders of magnitude lower at the same key length. Pure."""
    out = []
    for r in records:
        c = r.case
        panel = PANELS[1] if c.max_seqlen_q < c.max_seqlen_k else PANELS[0]
        out.append(Point(c.backend, c.direction, panel, round(c.total_k / c.batch), r.figures.tflops, r.figures.tbps,
                         r.figures.arithmetic_intensity))
    return out


def throughput_series(pts: Sequence[Point]) -> dict[tuple[str, str, str], list[tuple[int, float]]]:
    """(panel, back end, direction) -> sorted (keys per sequence, TFLOP/s for prefill or TB/s for decode).
    Pure."""
    series: dict[tuple[str, str, str], list[tuple[int, float]]] = {}
    for p in pts:
        value = p.tbps if p.panel == PANELS[1] else p.tflops
        series.setdefault((p.panel, p.backend, p.direction), []).append((p.keys, value))
    return {key: sorted(xy) for key, xy in sorted(series.items())}


def roofline_ceilings(records: Sequence[Record]) -> tuple[float, float, str] | None:
    """(TFLOP/s, ridge FLOP/B, which): the measured ceilings of the run where they were measured, else
    the datasheet's; None where neither is known. Pure."""
    for r in records:
        mm, copy = r.ceilings.matmul_tflops, r.ceilings.copy_tbps
        if mm and copy:
            return mm, mm / copy, "measured ceilings"
    for r in records:
        if r.figures.peak_tflops and r.figures.ridge_intensity:
            return r.figures.peak_tflops, r.figures.ridge_intensity, "datasheet ceilings"
    return None


def write_plots(folder: Path, records: Sequence[Record]) -> list[str]:
    """``tflops_vs_seqlen.png``, ``roofline.png`` and, with sustained figures, ``tflops_vs_tflops_per_j.png`` and
    ``sustained_trace.png`` in ``folder``; what was written, or why not."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return ["plots skipped: matplotlib is not installed (pip install matplotlib)"]
    if not records:
        return ["plots skipped: no timed results in this run"]
    folder.mkdir(parents=True, exist_ok=True)
    pts = points(records)
    written = [_throughput(plt, folder, throughput_series(pts))]
    ceilings = roofline_ceilings(records)
    if ceilings is None:
        written.append("roofline skipped: the GPU's peak is not known (pass --attn-peak-tflops)")
    else:
        written.append(_roofline(plt, folder, pts, *ceilings))
    energy = energy_points(records)
    if energy:
        written.append(_energy(plt, folder, energy))
    traces = sustained_traces(records)
    if traces:
        written.append(_traces(plt, folder, traces))
    return written


def sustained_traces(records: Sequence[Record]) -> dict[str, list[tuple[float, float, float | None]]]:
    """Case -> its sustained phase window by window: (seconds, time per call over the burst median, SM clock). Pure."""
    out: dict[str, list[tuple[float, float, float | None]]] = {}
    for r in records:
        s = r.sustained
        if s is not None and s.trace and r.median_s > 0:
            out[r.case.id] = [(w.t_s, w.per_call_s / r.median_s, w.sm_clock_mhz) for w in s.trace]
    return out


def _traces(plt: Any, folder: Path, traces: dict[str, list[tuple[float, float, float | None]]]) -> str:
    """What each case's clock and time per call did under sustained load, from the burst on."""
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 7), sharex=True)
    for ax in (top, bottom):
        ax.set_prop_cycle(color=plt.cm.tab20.colors)
    for case, windows in traces.items():
        top.plot([t for t, _, _ in windows], [c for _, _, c in windows], label=case, lw=1)
        bottom.plot([t for t, _, _ in windows], [x for _, x, _ in windows], lw=1)
    top.set_ylabel("SM clock (MHz)")
    top.set_title("Under sustained load: the SM clock and the time per call, window by window")
    bottom.set_ylabel("time per call / burst median")
    bottom.set_xlabel("seconds of back-to-back calls")
    for ax in (top, bottom):
        ax.grid(True, alpha=0.3)
    top.legend(fontsize=6)
    fig.tight_layout()
    return _save(plt, fig, folder / "sustained_trace.png")


def energy_points(records: Sequence[Record]) -> dict[str, list[tuple[float, float]]]:
    """Back end -> (TFLOP/J, TFLOP/s) under sustained load, of every record with both (``--attn-sustained``). Pure."""
    out: dict[str, list[tuple[float, float]]] = {}
    for r in records:
        s = r.sustained
        if s is not None and s.tflops_per_j is not None:
            out.setdefault(r.case.backend, []).append((s.tflops_per_j, s.tflops))
    return dict(sorted(out.items()))


def _energy(plt: Any, folder: Path, by_backend: dict[str, list[tuple[float, float]]]) -> str:
    """Throughput against energy efficiency under sustained load: up is faster, right spends fewer joules."""
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.set_prop_cycle(color=plt.cm.tab20.colors)
    for backend, xy in by_backend.items():
        ax.scatter([x for x, _ in xy], [y for _, y in xy], label=backend, s=22)
    ax.set_xlabel("TFLOP per joule (NVML's energy counter, sustained load)")
    ax.set_ylabel("TFLOP/s (sustained)")
    ax.set_title("Sustained throughput against energy per FLOP, by back end")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(plt, fig, folder / "tflops_vs_tflops_per_j.png")


def _throughput(plt: Any, folder: Path, series: dict[tuple[str, str, str], list[tuple[int, float]]]) -> str:
    """One panel for prefill-like cases, one for decode steps; a colour per back end, a marker per
    direction, points only (cases of one key length differ in heads and batch: no line joins them)."""
    fig, axes = plt.subplots(1, 2, figsize=(12, 5))
    backends = sorted({b for _, b, _ in series})
    colours = {b: plt.cm.tab20.colors[i % 20] for i, b in enumerate(backends)}
    for ax, panel, unit in zip(axes, PANELS, PANEL_UNITS, strict=True):
        mine = {k: xy for k, xy in series.items() if k[0] == panel}
        for (_, backend, direction), xy in mine.items():
            ax.scatter([x for x, _ in xy], [y for _, y in xy], color=colours[backend],
                       marker="^" if direction == "fwd+bwd" else "o", label=f"{backend} {direction}", s=22)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("keys per sequence (the batch's mean)")
        ax.set_ylabel(unit)
        ax.set_title(panel if mine else f"{panel}: none in this run", fontsize=9)
        ax.grid(True, alpha=0.3)
        if mine:
            ax.legend(fontsize=7)
    fig.suptitle("Attention throughput by back end")
    fig.tight_layout()
    return _save(plt, fig, folder / "tflops_vs_seqlen.png")


def _roofline(plt: Any, folder: Path, pts: Sequence[Point], peak: float, ridge: float, which: str) -> str:
    fig, ax = plt.subplots(figsize=(8, 5))
    ax.set_prop_cycle(color=plt.cm.tab20.colors)
    xs = [p.intensity for p in pts]
    lo, hi = min([*xs, ridge]) / 2, max([*xs, ridge]) * 2
    ax.plot([lo, ridge, hi], [peak * lo / ridge, peak, peak], color="black", label=f"ceilings ({peak:.0f} TFLOP/s,"
            f" {peak / ridge:.2f} TB/s)")
    for backend in sorted({p.backend for p in pts}):
        mine = [p for p in pts if p.backend == backend]
        ax.scatter([p.intensity for p in mine], [p.tflops for p in mine], label=backend, s=18)
    ax.set_xscale("log")
    ax.set_yscale("log")
    ax.set_xlabel("FLOPs per minimal byte")
    ax.set_ylabel("TFLOP/s")
    ax.set_title(f"Roofline ({which})")
    ax.grid(True, alpha=0.3, which="both")
    ax.legend(fontsize=7)
    fig.tight_layout()
    return _save(plt, fig, folder / "roofline.png")


def _save(plt: Any, fig: Any, path: Path) -> str:
    """``fig`` as a PNG at ``path``, written whole (a link planted at ``path`` is replaced, its target untouched)."""
    png = io.BytesIO()
    try:
        fig.savefig(png, format="png", dpi=120)
    finally:
        plt.close(fig)
    write_atomic(path, png.getvalue())
    return str(path)
