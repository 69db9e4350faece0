"""The end-of-session table: one row per case, back ends on the same problem side by side. Pure."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import TYPE_CHECKING

from .ceilings import fractions
from .relative import relative_to_fastest, slow_path_lines

if TYPE_CHECKING:
    from .ceilings import Ceilings
    from .device import DeviceInfo
    from .runner import CaseResult

COLUMNS = ("backend", "median", "±95%", "vs best", "speedup", "TFLOP/s", "MFU", "MFU@clk", "of ceil", "SM MHz",
           "TB/s", "FLOP/B", "bound", "peak mem", "timer")


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


def ceiling_fraction(result: CaseResult, ceilings: Ceilings | None) -> float | None:
    """The case's share of the measured ceiling of its bound: the matmul's TFLOP/s in its dtype when
    compute-bound, the copy's TB/s when memory-bound (None where not measured)."""
    f = result.figures
    shares = fractions(f.tflops, f.tbps, result.case.dtype, ceilings)
    value = shares["fraction_of_matmul" if f.bound == "compute" else "fraction_of_copy"]
    return float(value) if value is not None else None


def row(result: CaseResult, slowdown: float = 1.0, speedup: float | None = None,
        ceilings: Ceilings | None = None) -> tuple[str, ...]:
    f = result.figures
    clock = result.sm_clock_mhz
    timer = result.timer + (f" x{result.calls_per_sample}" if result.calls_per_sample > 1 else "")
    return (
        result.case.backend,
        fmt_time(f.median_s),
        fmt_pct(result.precision) if result.precision != float("inf") else "n/a",
        f"{slowdown:.2f}x",
        "n/a" if speedup is None else f"{speedup:.1f}x",
        fmt_num(f.tflops, 1 if f.tflops >= 1 else 3),
        fmt_pct(f.mfu_datasheet),
        fmt_pct(f.mfu_at_clock),
        fmt_pct(ceiling_fraction(result, ceilings)),
        "n/a" if clock is None else f"{clock:.0f}",
        fmt_num(f.tbps, 2 if f.tbps >= 0.01 else 4),
        fmt_num(f.arithmetic_intensity, 0),
        f.bound,
        fmt_bytes(result.peak_memory_bytes),
        timer,
    )


def _table(rows: Sequence[Sequence[str]], indent: str = "  ") -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    lines = []
    for r in rows:
        cells = [c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in enumerate(zip(r, widths, strict=True))]
        lines.append(indent + "  ".join(cells).rstrip())
    return lines


def timing_check_line(results: Sequence[CaseResult]) -> str | None:
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


def render(results: Sequence[CaseResult], device: DeviceInfo | None, skips: Iterable[str] = (),
           reference: str = "sdpa-math", ceilings: Ceilings | None = None) -> list[str]:
    """Lines of the summary: a header, then one block per problem (group). ``ceilings``: the measured
    ceilings of the device, for the "of ceil" column."""
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
        check = timing_check_line(results)
        if check:
            lines.append(check)
    relative = relative_to_fastest(results, reference)
    groups: dict[str, list[CaseResult]] = {}
    for r in results:
        groups.setdefault(r.case.group, []).append(r)
    notes: list[str] = []
    for group, members in groups.items():
        first = members[0]
        lines.append("")
        lines.append(f"{group}: {first.case.describe()}, {first.work.flops / 1e9:,.3f} GFLOP per call")
        members = sorted(members, key=lambda r: r.median_s)
        lines.extend(_table([COLUMNS, *(row(r, relative[r.case.id].slowdown, relative[r.case.id].speedup, ceilings)
                                        for r in members)]))
        how = [f"{r.case.backend}: {r.expression}" for r in members if r.expression]
        if len({r.expression for r in members if r.expression}) > 1:
            lines.append("  mask as: " + "; ".join(how))
        for r in members:
            if r.figures.peak_note and r.figures.peak_note not in notes:
                notes.append(r.figures.peak_note)
            if r.timer_note:
                notes.append(f"{r.case.id}: {r.timer_note}")
            if not r.warmup.settled:
                notes.append(f"{r.case.id}: warm-up did not settle within its time cap")
            if r.timing_check is not None and not r.timing_check.ok:
                notes.append(f"{r.case.id}: timing self-check: {r.timing_check.describe()}")
            if r.throttle is not None and (r.throttle.mostly_throttled or r.throttle.dropped):
                flag = "mostly measured while throttled: " if r.throttle.mostly_throttled else ""
                notes.append(f"{r.case.id}: {flag}{r.throttle.describe()}")
            if r.stop_reason != "precision":
                notes.append(f"{r.case.id}: stopped at the {r.stop_reason} at ±{fmt_pct(r.precision)}")
    slow = slow_path_lines(results, relative)
    if slow:
        lines.append("")
        lines.append("slow paths (the mask held as data, against the fastest expression of the same mask):")
        lines.extend(f"  {line}" for line in slow)
    if notes:
        lines.append("")
        lines.extend(f"note: {n}" for n in notes)
    reasons: dict[str, int] = {}
    for reason in skips:
        reasons[reason] = reasons.get(reason, 0) + 1
    if reasons:
        lines.append("")
        lines.append("skipped:")
        lines.extend(f"  {n} x {reason}" for reason, n in sorted(reasons.items(), key=lambda kv: -kv[1]))
    return lines
