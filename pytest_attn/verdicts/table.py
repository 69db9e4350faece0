"""The end-of-session table: one row per result record, back ends on the same problem side by side,
and the notes that say which figures to doubt. Pure."""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass

from ..core.device import DeviceInfo
from ..core.flops import MLA_CONVENTION
from ..core.record import Peers, Record
from ..core.sustained import ranking_change
from .layout import fit_table, printable, wrap
from .peers import peers_of, slow_path_lines
from .rule import Comparison


def fmt_time(seconds: float) -> str:
    if seconds >= 1:
        return f"{seconds:.3f} s"
    if seconds >= 1e-3:
        return f"{seconds * 1e3:.3f} ms"
    return f"{seconds * 1e6:.2f} us"


def fmt_pct(value: float | None) -> str:
    if value is None:
        return "n/a"
    return "<0.1%" if 0 < value < 0.001 else f"{value * 100:.1f}%"


def fmt_bytes(value: int | None) -> str:
    if value is None:
        return "n/a"
    if value >= 2**30:
        return f"{value / 2**30:.2f} GiB"
    return f"{value / 2**20:.1f} MiB"


def fmt_num(value: float | None, digits: int = 1) -> str:
    return "n/a" if value is None else f"{value:,.{digits}f}"


def fmt_change(c: Comparison | None) -> str:
    """A case's change against a saved run (``--benchmark-compare``), with the verdict where it is one to look at:
    ``+10.9% SLOWER``, ``-0.4%``; ``new`` where the saved run has no such case."""
    if c is None:
        return "n/a"
    if c.change is None:
        return "new" if c.verdict == "NEW" else "n/a"
    flag = "" if c.verdict == "SAME" else f" {c.verdict}"
    return f"{c.change * 100:+.1f}%{flag}"


@dataclass(frozen=True)
class Row:
    """What one row's cells are read from: the result, and where it stands among its problem's results."""

    result: Record
    slowdown: float = 1.0  # its median over the fastest of its problem
    speedup: float | None = None  # the reference back end's median over its own
    compared: Comparison | None = None  # against a saved run (--benchmark-compare)


def _timer(r: Row) -> str:
    t = r.result.timing
    return t.timer + (f" x{t.calls_per_sample}" if t.calls_per_sample > 1 else "")


def _clock(r: Row) -> str:
    clock = r.result.clocks.sm_clock_mhz
    return "n/a" if clock is None else f"{clock:.0f}"


@dataclass(frozen=True)
class Column:
    name: str
    cell: Callable[[Row], str]


#: Every column, declared once with its cell, in the order of a compute-bound problem's table.
COLUMNS: tuple[Column, ...] = (
    Column("backend", lambda r: r.result.case.backend),
    Column("median", lambda r: fmt_time(r.result.figures.median_s)),
    Column("±95%", lambda r: fmt_pct(p) if math.isfinite(p := r.result.timing.precision) else "n/a"),
    Column("sustained", lambda r: _sustained_cells(r.result)[0]),
    Column("vs saved", lambda r: fmt_change(r.compared)),
    Column("vs best", lambda r: f"{r.slowdown:.2f}x"),
    Column("speedup", lambda r: "n/a" if r.speedup is None else f"{r.speedup:.1f}x"),
    Column("TFLOP/s", lambda r: fmt_num(f := r.result.figures.tflops, 1 if f >= 1 else 3)),
    Column("MFU", lambda r: fmt_pct(r.result.figures.mfu_datasheet)),
    Column("MFU@clk", lambda r: fmt_pct(r.result.figures.mfu_at_clock)),
    Column("of ceil", lambda r: fmt_pct(r.result.ceilings.of_bound(r.result.figures.bound))),
    Column("SM MHz", _clock),
    Column("load MHz", lambda r: _sustained_cells(r.result)[1]),
    Column("W", lambda r: _sustained_cells(r.result)[2]),
    Column("TFLOP/J", lambda r: _sustained_cells(r.result)[3]),
    Column("TB/s", lambda r: fmt_num(f := r.result.figures.tbps, 2 if f >= 0.01 else 4)),
    Column("FLOP/B", lambda r: fmt_num(r.result.figures.arithmetic_intensity, 0)),
    Column("bound", lambda r: r.result.figures.bound),
    Column("peak mem", lambda r: fmt_bytes(r.result.peak_memory_bytes)),
    Column("timer", _timer),
)
ORDER = tuple(c.name for c in COLUMNS)
#: A memory-bound problem (decode) reads TB/s against the copy ceiling first.
MEMORY_ORDER = ("backend", "median", "±95%", "sustained", "vs saved", "vs best", "speedup", "TB/s", "of ceil",
                "TFLOP/s", "MFU", "MFU@clk", "SM MHz", "load MHz", "W", "TFLOP/J", "FLOP/B", "bound", "peak mem",
                "timer")
#: What goes first where a table is wider than the terminal (every figure stays in the JSON and --attn-report).
DROP_ORDER = ("FLOP/B", "bound", "SM MHz", "peak mem", "MFU@clk", "speedup", "of ceil", "vs best", "TB/s", "W")
MEMORY_DROP_ORDER = ("FLOP/B", "bound", "SM MHz", "MFU@clk", "MFU", "TFLOP/s", "peak mem", "speedup", "vs best", "W")
_BY_NAME = {c.name: c for c in COLUMNS}


def cells(row: Row, order: Sequence[str] = ORDER) -> tuple[str, ...]:
    """The row's cells, in ``order`` (column names)."""
    return tuple(_BY_NAME[name].cell(row) for name in order)


def _sustained_cells(result: Record) -> tuple[str, str, str, str]:
    """``--attn-sustained``: the time per call under settled load (and how much slower than the burst), its SM
    clock, the power, and TFLOP per joule; n/a without it."""
    s = result.sustained
    if s is None:
        return ("n/a",) * 4
    slower = f" ({(s.burst_ratio - 1) * 100:+.0f}%)" if s.burst_ratio else ""
    return (fmt_time(s.median_s) + slower + ("" if s.settled else " ~"),
            "n/a" if s.sm_clock_mhz is None else f"{s.sm_clock_mhz:.0f}",
            "n/a" if s.power_w is None else f"{s.power_w:.0f}",
            "n/a" if s.tflops_per_j is None else f"{s.tflops_per_j:.3g}")


#: A clock that fell by more than this over a case's samples is flagged.
CLOCK_DRIFT_FLAG = 0.03


def result_notes(r: Record, time_cap: bool = True) -> list[str]:
    """What to doubt about one result: peak notes, timer fall-backs, an unsettled warm-up, a timing
    self-check that disagreed, throttling, a time cap before the precision target (unless ``time_cap`` is False:
    :func:`time_cap_notes` says it for the run)."""
    notes = [r.figures.peak_note] if r.figures.peak_note else []
    t, throttle = r.timing, r.clocks.throttle
    if t.timer_note:
        notes.append(f"{r.case.id}: {t.timer_note}")
    if not t.warmup_settled:
        notes.append(f"{r.case.id}: warm-up did not settle within its time cap")
    if r.timing_check is not None and not r.timing_check.ok:
        notes.append(f"{r.case.id}: timing self-check: {r.timing_check.describe()}")
    if throttle is not None and (throttle.mostly_throttled or throttle.dropped):
        flag = "mostly measured while throttled: " if throttle.mostly_throttled else ""
        notes.append(f"{r.case.id}: {flag}{throttle.describe()}")
    if t.stop_reason != "precision" and (time_cap or t.stop_reason != "time-cap"):
        notes.append(f"{r.case.id}: stopped at the {t.stop_reason} at ±{fmt_pct(t.precision)}")
    if t.l2.endswith("warm between calls"):
        notes.append(f"{r.case.id}: {t.l2} (the inputs fit in L2 three times over: the figure is a warm-L2 one)")
    drift = r.clocks.drift
    if drift is not None and drift < -CLOCK_DRIFT_FLAG:
        time_drift = "n/a" if t.drift is None else f"{t.drift:+.1%}"
        notes.append(f"{r.case.id}: the SM clock fell {-drift:.1%} while it was sampled ({r.clocks.sm_clock_max_mhz} ->"
                     f" {r.clocks.sm_clock_min_mhz} MHz at the extremes; time drifted {time_drift}): its median"
                     " mixes clocks -- let the GPU settle, lock its clock, or read MFU@clk")
    if r.sustained is not None and (r.sustained.note or r.sustained.energy_source != "energy counter"):
        said = r.sustained.note or f"energy per call {r.sustained.energy_source} (no NVML energy counter)"
        notes.append(f"{r.case.id}: sustained: {said}")
    if r.hbm is not None:
        notes.append(f"{r.case.id}: {r.hbm.describe()}")
    if r.hbm_note:
        notes.append(f"{r.case.id}: HBM not measured: {r.hbm_note}")
    return notes


#: A GPU run lists this many cases that stopped at their time cap (-v: every one), and counts the rest.
TIME_CAP_NOTES = 5


@dataclass(frozen=True)
class TimeCaps:
    """How a run's summary says which cases stopped at their time cap before the precision ``target``: on a CPU
    in one line (nearly every case does there), on a GPU the first :data:`TIME_CAP_NOTES`; ``every`` one (-v)."""

    cpu: bool
    target: float
    every: bool = False


def time_cap_notes(results: Sequence[Record], caps: TimeCaps) -> list[str]:
    """The notes of the cases that stopped at their time cap, as ``caps`` says."""
    capped = [r for r in results if r.timing.stop_reason == "time-cap"]
    if not capped:
        return []
    if caps.cpu and not caps.every:
        return [f"{len(capped)} case(s) stopped at their time cap before the {caps.target * 100:g} % precision target:"
                " on a CPU that is expected; their medians are still compared with their own noise (-v lists them)"]
    shown = capped if caps.every else capped[:TIME_CAP_NOTES]
    notes = [f"{r.case.id}: stopped at the time-cap at ±{fmt_pct(r.timing.precision)}" for r in shown]
    if len(capped) > len(shown):
        notes.append(f"and {len(capped) - len(shown)} more case(s) stopped at their time cap before the"
                     f" {caps.target * 100:g} % precision target (-v lists them)")
    return notes


def time_lines(results: Sequence[Record]) -> list[str]:
    """Where a run's time went: setting cases up (inputs, plans, first calls -- where torch.compile and
    any JIT left to the first call compile), warming up, and sampling."""
    if not results:
        return []
    checks = sum(r.check.seconds for r in results if r.check is not None)
    spots = sum(r.check.spot_seconds for r in results if r.check is not None)
    setup = sum(r.timing.setup_s for r in results) - checks
    warmup = sum(r.timing.prepare_s - r.timing.setup_s for r in results)
    sampling = sum(r.timing.elapsed_s - r.timing.prepare_s for r in results) - spots
    loaded = [r.sustained.phase_s for r in results if r.sustained is not None]
    load = f", the sustained phase {sum(loaded):.1f} s ({len(loaded)} cases)" if loaded else ""
    return [f"time over {len(results)} cases: setup {setup:.1f} s (inputs, plans, first calls: torch.compile and"
            f" any compilation left to them), checks against the reference {checks:.1f} s, warm-up and capture"
            f" {warmup:.1f} s, sampling {sampling:.1f} s, spot checks while sampling {spots:.1f} s{load}"]


def sustained_lines(results: Sequence[Record]) -> list[str]:
    """What the sustained columns are, and where the order of the back ends under load differs from a burst."""
    loaded = [r for r in results if r.sustained is not None]
    if not loaded:
        return []
    groups: dict[str, list[tuple[str, float, float]]] = {}
    for r in loaded:
        assert r.sustained is not None
        groups.setdefault(r.case.group, []).append((r.case.backend, r.median_s, r.sustained.median_s))
    head = ("sustained: the time per call back to back once the SM clock and power settled (--attn-sustained; the"
            " change against the burst median; ~ where it never settled), its SM clock (load MHz), the power (W)"
            " and TFLOP per joule from NVML's energy counter; median and the other columns are the burst: a few"
            " calls after idle, at boost clock")
    return [head, *ranking_change(groups)]


def timing_check_line(results: Sequence[Record]) -> str | None:
    """One line for ``--attn-verify-timing``: how many cases were checked, the range of reported median
    over the profiler's kernel time, and how many differ by more than the tolerance."""
    checks = [r.timing_check for r in results if r.timing_check is not None]
    if not checks:
        return None
    ratios = [c.ratio for c in checks]
    flagged = sum(not c.ok for c in checks)
    return (f"timing self-check: {len(checks)} cases, reported median / profiler kernel time"
            f" {min(ratios):.3f} to {max(ratios):.3f}; {flagged} beyond {checks[0].tolerance:.0%}"
            + (" (see the notes)" if flagged else ""))


def compared_lines(name: str, comparisons: Sequence[Comparison]) -> list[str]:
    """What the "vs saved" column is against, and its verdicts counted (a jump is never left to be spotted)."""
    found: dict[str, int] = {}
    for c in comparisons:
        found[c.verdict] = found.get(c.verdict, 0) + 1
    counted = ", ".join(f"{n} {v}" for v, n in found.items()) or "no case in common"
    thresholds = sorted({c.threshold for c in comparisons if c.threshold is not None})
    at = "/".join(f"{t:.1%}" for t in thresholds) or "the"
    return [f"vs saved: the median's change against {name} (--benchmark-compare): {counted}; SLOWER / FASTER where"
            f" it moved beyond both runs' noise (3 sigma) and half the {at} threshold (--attn-threshold), AMBIGUOUS"
            " where the noise cannot tell, TIMER where the two were timed differently (not compared)"]


def render(results: Sequence[Record], device: DeviceInfo | None, skips: Iterable[str] = (),
           reference: str = "sdpa-math", width: int | None = None,
           compared: tuple[str, Sequence[Comparison]] | None = None, time_caps: TimeCaps | None = None) -> list[str]:
    """Lines of the summary: a header, then one block per problem (group), the slow paths, the notes
    and the skip reasons; within ``width`` columns where it is given (tables lose their emptiest and least
    needed columns, a note says which, and prose is wrapped). ``compared``: a saved run's name and each case's
    comparison with it, for the "vs saved" column. ``time_caps``: how the cases stopped at their time cap are
    said (:func:`time_cap_notes`; None: a note for each). Every line printed as text (:func:`~.layout.printable`):
    a name or a note read from a file (``pytest-attn merge``) cannot drive the terminal."""
    lines = _header(results, device, reference) + sustained_lines(results)
    by_case = {c.name: c for c in compared[1]} if compared else {}
    if compared:
        lines += compared_lines(compared[0], [c for c in compared[1] if c.current is not None])
    relative = peers_of(results, reference)
    groups: dict[str, list[Record]] = {}
    for r in results:
        groups.setdefault(r.case.group, []).append(r)
    notes: list[str] = []
    dropped: list[str] = []
    for group, members in groups.items():
        block, gone = _group(group, sorted(members, key=lambda r: r.median_s), relative, width, by_case)
        lines += block
        dropped += [c for c in gone if c not in dropped]
        for r in members:
            notes.extend(n for n in result_notes(r, time_caps is None) if n not in notes)
    if time_caps is not None:
        notes += time_cap_notes(results, time_caps)
    if dropped:
        notes.append(f"left out to fit {width} columns: {', '.join(dropped)} (in the JSON and --attn-report; a wider"
                     " terminal shows them)")
    slow = slow_path_lines(results, relative)
    if slow:
        lines += ["", "slow paths (the mask held as data, against the fastest expression of the same mask):"]
        lines += [f"  {line}" for line in slow]
    if notes:
        lines += ["", *(f"note: {n}" for n in notes)]
    reasons: dict[str, int] = {}
    for reason in skips:
        reasons[reason] = reasons.get(reason, 0) + 1
    if reasons:
        lines += ["", "skipped:"]
        lines += [f"  {n} x {reason}" for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1])]
    return wrap([printable(line) for line in lines], width)  # (records merged from files: their names are text)


def _header(results: Sequence[Record], device: DeviceInfo | None, reference: str) -> list[str]:
    lines: list[str] = []
    if device is not None:
        lines.append(f"device: {device.describe()}")
        if device.is_cuda and device.nvml_status != "ok":
            lines.append(f"NVML: {device.nvml_status}")
    if results:
        lines.append(
            "FLOPs: exact-mask convention (2*(d_qk+d_v) per visible query-key pair per head, bwd = 2.5 x fwd);"
            " MFU vs the datasheet peak, MFU@clk vs the peak at the SM clock seen while sampling;"
            f" speedup = {reference}'s median / this one's (n/a where {reference} did not run);"
            " of ceil = share of the measured ceiling of its bound (matmul in its dtype, or copy)"
        )
        if any(r.figures.flops_convention == MLA_CONVENTION for r in results):
            lines.append("latent (MLA) cases: FlashMLA's convention (2*(d_qk+d_v) per query-key pair per head, every"
                         " pair; bytes read the latent cache once), as FlashMLA's published figures count")
        check = timing_check_line(results)
        if check:
            lines.append(check)
    return lines


def _group(group: str, members: list[Record], relative: dict[str, Peers], width: int | None = None,
           compared: Mapping[str, Comparison] | None = None) -> tuple[list[str], list[str]]:
    """One problem: its description, then a row per back end, fastest first, and how each held the mask;
    and the columns left out to fit ``width``."""
    first = members[0]
    lines = ["", f"{group}: {first.case.describe()}, {first.work.flops / 1e9:,.3f} GFLOP per call"]
    compared = compared or {}
    memory = all(r.figures.bound == "memory" for r in members)
    order = MEMORY_ORDER if memory else ORDER
    rows = [cells(Row(r, relative[r.name].slowdown, relative[r.name].speedup, compared.get(r.name)), order)
            for r in members]
    table, dropped = fit_table([order, *rows], width, MEMORY_DROP_ORDER if memory else DROP_ORDER)
    lines += table
    if len({r.expression for r in members if r.expression}) > 1:
        lines.append("  mask as: " + "; ".join(f"{r.case.backend}: {r.expression}" for r in members if r.expression))
    gpus = {r.device.uuid for r in members if r.device.uuid}
    if len(gpus) > 1:  # a paired A/B, or a problem too long to keep whole, spreads over GPUs (core.schedule)
        lines.append(f"  measured on {len(gpus)} GPUs: \"vs best\" compares them (two GPUs of one model run the same"
                     " kernel up to a few % apart)")
    return lines, dropped
