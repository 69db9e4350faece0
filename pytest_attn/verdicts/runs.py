"""The benchmarks of a run as verdicts see them: a name, a group, a median and how noisy it was, and
the result record behind it where the run holds one.

A run is pytest-benchmark's JSON (``--benchmark-json``, a saved run, a stored baseline); pytest-attn
writes each result's :class:`~pytest_attn.core.record.Record` as its ``extra_info``. Runs written
before the record existed (flat ``extra_info`` keys) and plain pytest-benchmark runs are still read,
with what they hold: a median, and a spread from pytest-attn's ``precision`` or the IQR. Pure.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from ..core.record import Record, TimerPin, is_record
from ..core.stats import median
from .fleet import center


@dataclass(frozen=True)
class Bench:
    name: str  # pytest-benchmark's fullname: the test's node id
    group: str
    backend: str
    median_s: float
    spread: float  # relative: the median's 95 % CI half-width when pytest-attn measured it, else IQR / 2 / median
    tflops: float | None = None
    mfu: float | None = None
    record: Record | None = None
    repeats_s: tuple[float, ...] = ()  # the medians of independent runs (--attn-add-to-baseline), when known
    sm_clock_mhz: float | None = None  # the median SM clock while sampling (a baseline: of its repeats)
    stop_reason: str = ""  # "precision", "time-cap", "sample-cap"; an A/B's "noise-cap" ("" when not recorded)
    repeats_clock_mhz: tuple[float, ...] = ()  # the SM clock of each of ``repeats_s``, when all are known
    repeats_gpu: tuple[str, ...] = ()  # the GPU (UUID) of each of ``repeats_s`` ("" where not known)

    @property
    def gpu(self) -> str | None:
        """The UUID of the GPU that measured this median (the newest repeat's, for a baseline)."""
        return self.record.device.uuid if self.record is not None else None

    @property
    def gpus(self) -> tuple[str | None, ...]:
        """The GPUs this median stands for: its repeats' where they came from several (runs gated as one, ``merge
        --reruns``), else its own GPU."""
        several = tuple(dict.fromkeys(self.repeats_gpu))
        return several if len(several) > 1 else (self.gpu,)

    @property
    def bound(self) -> str:
        """"compute", "memory" or "unknown": the class whose between-GPU spread stands for this case's."""
        return self.record.figures.bound if self.record is not None else "unknown"

    @property
    def pin(self) -> TimerPin | None:
        """The timer, calls per sample and input sets of the median (None for a run without records)."""
        return self.record.timing.pin if self.record is not None else None

    @property
    def converged(self) -> bool:
        """False when sampling stopped at a time cap before the precision target."""
        return self.stop_reason not in ("time-cap", "noise-cap")

    @property
    def cycles(self) -> float | None:
        """Median time x median SM clock: the figure with the clock's speed taken out (over repeats, the
        median of each repeat's time x clock)."""
        if self.repeats_s and len(self.repeats_clock_mhz) == len(self.repeats_s):
            return center([t * f * 1e6 for t, f in zip(self.repeats_s, self.repeats_clock_mhz, strict=True)],
                          self.repeats_gpu)
        return self.median_s * self.sm_clock_mhz * 1e6 if self.sm_clock_mhz else None


def _finite(value: Any) -> float | None:
    return float(value) if isinstance(value, (int, float)) and math.isfinite(value) else None


def repeat_gpus(record: Record) -> tuple[str, ...]:
    """The GPU of each stored repeat: as recorded, or -- a baseline from before they were -- the record's own
    GPU for all (a case's repeats were then added on one GPU; docs/gate.md)."""
    timing = record.timing
    if len(timing.repeats_gpu) == len(timing.repeats_s):
        return timing.repeats_gpu
    return (record.device.uuid or "",) * len(timing.repeats_s)


def bench_of(record: Record, median_s: float | None = None) -> Bench:
    """A record as a benchmark (the current run, before pytest-benchmark wrote anything). A record holding repeats
    (runs gated as one, ``merge --reruns``) stands for their centre, as a stored baseline's ``stats.median`` does --
    not for its newest run's median, which its samples are of."""
    clocks = record.clocks.repeats_sm_clock_mhz
    repeats = record.timing.repeats_s
    if median_s is None and repeats:
        median_s = center(repeats, repeat_gpus(record))
    return Bench(record.name, record.case.group, record.case.backend, median_s or record.median_s,
                 _finite(record.timing.precision) or 0.0, record.figures.tflops, record.figures.mfu_datasheet, record,
                 record.timing.repeats_s, median(list(clocks)) if clocks else record.clocks.sm_clock_mhz,
                 record.timing.stop_reason, clocks, repeat_gpus(record))


def _bench(raw: Mapping[str, Any]) -> Bench:
    stats, info = raw["stats"], raw.get("extra_info") or {}
    name = raw.get("fullname") or raw["name"]
    median = float(stats["median"])
    if is_record(info):
        bench = bench_of(Record.from_json(info), median)
        return dataclasses.replace(bench, name=name, group=raw.get("group") or bench.group)
    spread = _finite(info.get("precision"))
    if spread is None:
        iqr = _finite(stats.get("iqr"))
        spread = iqr / 2 / median if iqr is not None and median > 0 else 0.0
    return Bench(name, raw.get("group") or "", str(info.get("backend", "")), median, spread,
                 _finite(info.get("tflops")), _finite(info.get("mfu_datasheet")),
                 sm_clock_mhz=_finite(info.get("sm_clock_mhz")), stop_reason=str(info.get("stop_reason") or ""))


def benches(run: Mapping[str, Any]) -> dict[str, Bench]:
    """The benchmarks of a run (pytest-benchmark JSON), by full name."""
    out: dict[str, Bench] = {}
    for raw in run.get("benchmarks", []):
        bench = _bench(raw)
        out[bench.name] = bench
    return out


def by_name(records: Iterable[Record]) -> dict[str, Bench]:
    return {b.name: b for b in map(bench_of, records)}


def records(run: Mapping[str, Any]) -> list[Record]:
    """The result records a run holds (none for a run written before the record existed)."""
    return [b.record for b in benches(run).values() if b.record is not None]


def partial_note(run: dict[str, Any]) -> str | None:
    """How a saved run was partial ("interrupted (...), 12 of 40 cases measured"), or None."""
    mark = run.get("attn_partial")
    if not isinstance(mark, dict):
        return None
    selected = mark.get("cases_selected")
    of = f" of {selected}" if selected is not None else ""
    return f"{mark.get('reason', 'stopped early')}, {mark.get('cases_measured', '?')}{of} cases measured"


#: How a cut-short run's reason begins, for its headline (what comes before " (" is what happened).
CUT_SHORT = ("interrupted", "stopped early", "the process died", "cut short")


def partial_headline(run: Mapping[str, Any]) -> str | None:
    """A cut-short run in the words of a headline -- "interrupted after 12 of 40 cases: partial", "the process
    died after 16 cases: partial", a merge's "40 cases, not the whole run: partial" -- or None for a whole run."""
    mark = run.get("attn_partial")
    if not isinstance(mark, dict):
        return None
    reason = str(mark.get("reason") or "stopped early")
    _, _, of_file = reason.partition(": ")  # a merge of one cut-short file: "run.json: interrupted (SIGTERM)"
    if not reason.startswith(CUT_SHORT) and "; " not in reason and of_file.startswith(CUT_SHORT):
        reason = of_file
    selected = mark.get("cases_selected")
    cases = f"{mark.get('cases_measured', '?')}{f' of {selected}' if selected is not None else ''} cases"
    if reason.startswith(CUT_SHORT):
        return f"{reason.split(' (')[0]} after {cases}: partial"
    return f"{cases}, not the whole run: partial"
