"""The workload view of the summary (``--attn-workload``): for each back end, a model step's attention time --
each replayed record's median time x the times the step makes that call -- its share per call site, the MFU
over the step, and the step if the fastest back end ran each record. A back end that did not run every
replayable record gets no step total, only the records it missed: a partial sum is never shown as a total."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ..core.record import Record
from ..core.replay import Replay
from ..core.workload import WorkloadRecord
from .table import fmt_pct, fmt_time

SHOWN_SITES = 3


@dataclass(frozen=True)
class StepTotal:
    """One back end over one workload: its step time and work, or the records it missed."""

    backend: str
    time_s: float | None  # None: it missed records
    flops: int
    peak_tflops: float | None
    sites: tuple[tuple[str, float], ...]  # (call site, seconds per step), the largest first
    missing: tuple[WorkloadRecord, ...]

    @property
    def mfu(self) -> float | None:
        if self.time_s is None or not self.time_s or self.peak_tflops is None:
            return None
        return self.flops / self.time_s / (self.peak_tflops * 1e12)


def step_totals(replay: Replay, results: Sequence[Record]) -> list[StepTotal]:
    by_case = {(r.case.shape, r.case.backend): r for r in results}
    names = {v.shape.name: rec for rec, v in replay.variants}
    backends = list(dict.fromkeys(r.case.backend for r in results if r.case.shape in names))
    totals = []
    for backend in backends:
        ran = [(rec, by_case.get((v.shape.name, backend))) for rec, v in replay.variants]
        missing = tuple(rec for rec, r in ran if r is None)
        sites: dict[str, float] = {}
        for rec, r in ran:
            if r is not None:
                sites[rec.site] = sites.get(rec.site, 0.0) + r.timing.median_s * rec.count
        flops = sum(r.work.flops * rec.count for rec, r in ran if r is not None)
        peaks = {r.figures.peak_tflops for _, r in ran if r is not None}
        totals.append(StepTotal(backend, None if missing else sum(sites.values()), flops,
                                peaks.pop() if len(peaks) == 1 else None,
                                tuple(sorted(sites.items(), key=lambda kv: -kv[1])), missing))
    return totals


def fastest_per_record(replay: Replay, results: Sequence[Record]) -> tuple[float | None, dict[str, int],
                                                                             tuple[WorkloadRecord, ...]]:
    """The step if each record ran on its fastest back end, how many records each back end won, and the records
    no back end ran (then no total)."""
    best: dict[str, Record] = {}
    for r in results:
        if r.case.shape not in best or r.timing.median_s < best[r.case.shape].timing.median_s:
            best[r.case.shape] = r
    unrun = tuple(rec for rec, v in replay.variants if v.shape.name not in best)
    won: dict[str, int] = {}
    for _, v in replay.variants:
        if v.shape.name in best:
            won[best[v.shape.name].case.backend] = won.get(best[v.shape.name].case.backend, 0) + 1
    total = None if unrun or not replay.variants else sum(
        best[v.shape.name].timing.median_s * rec.count for rec, v in replay.variants)
    return total, won, unrun


def _ids(records: Sequence[WorkloadRecord]) -> str:
    return ", ".join(f"r{r.order}" for r in records)


def _backend_line(t: StepTotal) -> str:
    if t.time_s is None:
        return (f"  {t.backend}: no step total: it did not run {_ids(t.missing)} (pytest -rs says why: a skipped case"
                " names its reason)")
    mfu = fmt_pct(t.mfu)
    shares = "; ".join(f"{site} {fmt_pct(s / t.time_s if t.time_s else None)}"
                       for site, s in t.sites[:SHOWN_SITES])
    more = f"; {len(t.sites) - SHOWN_SITES} more sites" if len(t.sites) > SHOWN_SITES else ""
    return f"  {t.backend}: {fmt_time(t.time_s)} of attention per step, MFU {mfu}; by call site: {shares}{more}"


def workload_lines(replays: Sequence[Replay], results: Sequence[Record]) -> list[str]:
    lines: list[str] = []
    for replay in replays:
        w = replay.workload
        calls = sum(r.count for r in w.records)
        lines.append(f"workload {w.name} ({replay.origin}): {len(w.records)} distinct call(s), {calls} per step")
        if replay.refused:
            left = sum(r.count for r, _ in replay.refused)
            lines.append(f"  every total below leaves out {len(replay.refused)} record(s) ({left} call(s)) that cannot"
                         " be replayed: " + "; ".join(f"r{r.order} ({r.call.api} at {r.site}, x{r.count}): {why}"
                                                       for r, why in replay.refused))
        totals = step_totals(replay, results)
        if not totals:
            lines.append("  no back end ran any of its records (pytest -rs says why)")
            continue
        totals.sort(key=lambda t: (t.time_s is None, t.time_s or 0.0))  # fastest first, those with no total last
        lines.extend(_backend_line(t) for t in totals)
        if any(t.time_s is not None and t.peak_tflops is None for t in totals):
            lines.append("  MFU n/a: no peak known for this device (a CPU, or a GPU not in the peak table:"
                         " --attn-peak-tflops gives one)")
        best, won, unrun = fastest_per_record(replay, results)
        if best is None:
            lines.append(f"  fastest back end per record: no step total: no back end ran {_ids(unrun)}")
        else:
            who = ", ".join(f"{b} {n}" for b, n in sorted(won.items(), key=lambda kv: -kv[1]))
            lines.append(f"  fastest back end per record: {fmt_time(best)} per step (records won: {who})")
    return lines
