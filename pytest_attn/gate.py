"""The noise-aware regression gate. Pure: two runs in pytest-benchmark's JSON format in, verdicts out.

Per benchmark: SAME, FASTER, SLOWER, NEW (not in the baseline) or MISSING (in the baseline, not in
this run). SLOWER only when the median moved by more than the threshold (default 5 %, settable per
back end and per group) **and** by more than the noise both runs showed -- the sum of their relative
spreads (the half-width of each median's 95 % CI when pytest-attn measured it, else half the IQR
over the median) -- so a noisy case does not flap. FASTER is the mirror image.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

VERDICTS = ("SLOWER", "FASTER", "SAME", "NEW", "MISSING")
DEFAULT_THRESHOLD = 0.05


@dataclass(frozen=True)
class Entry:
    name: str
    group: str
    backend: str
    median_s: float
    spread: float  # relative
    tflops: float | None = None
    mfu: float | None = None


def entries(run: Mapping[str, Any]) -> dict[str, Entry]:
    """The benchmarks of a run (pytest-benchmark JSON), by full name."""
    out: dict[str, Entry] = {}
    for bench in run.get("benchmarks", []):
        stats, info = bench["stats"], bench.get("extra_info", {}) or {}
        median = float(stats["median"])
        spread = info.get("precision")
        if not isinstance(spread, (int, float)) or spread != spread or spread == float("inf"):
            iqr = stats.get("iqr")
            spread = (float(iqr) / 2 / median) if isinstance(iqr, (int, float)) and median > 0 else 0.0
        name = bench.get("fullname") or bench["name"]
        out[name] = Entry(name, bench.get("group") or "", str(info.get("backend", "")), median, float(spread),
                          info.get("tflops"), info.get("mfu_datasheet"))
    return out


def parse_fraction(text: str, what: str = "threshold") -> float:
    """``5%`` or ``0.05`` -> 0.05; more than 0, less than 1000 %."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a number or a percentage (e.g. 5% or 0.05)") from None
    if not 0 < value < 10:
        raise ValueError(f"{what} {text!r} must be more than 0 and less than 1000% (e.g. 5%)")
    return value


def parse_override(text: str) -> tuple[str, str, float]:
    """``backend:flex=10%`` or ``group:NAME=3%`` -> (kind, name, fraction)."""
    m = re.fullmatch(r"\s*(backend|group):([^=]+)=(.+)", text)
    if not m:
        raise ValueError(f"threshold override {text!r} must look like backend:NAME=10% or group:NAME=3%")
    return m[1], m[2].strip(), parse_fraction(m[3])


@dataclass(frozen=True)
class Thresholds:
    default: float = DEFAULT_THRESHOLD
    by_backend: Mapping[str, float] = field(default_factory=dict)
    by_group: Mapping[str, float] = field(default_factory=dict)

    @classmethod
    def build(cls, default: float, overrides: Iterable[tuple[str, str, float]]) -> Thresholds:
        backend: dict[str, float] = {}
        group: dict[str, float] = {}
        for kind, name, value in overrides:
            (backend if kind == "backend" else group)[name] = value
        return cls(default, backend, group)

    def for_entry(self, entry: Entry) -> float:
        if entry.group in self.by_group:
            return self.by_group[entry.group]
        return self.by_backend.get(entry.backend, self.default)


@dataclass(frozen=True)
class Comparison:
    name: str
    verdict: str
    baseline: Entry | None
    current: Entry | None
    change: float | None = None  # current / baseline - 1
    threshold: float | None = None
    noise: float | None = None

    @property
    def entry(self) -> Entry:
        found = self.current or self.baseline
        assert found is not None
        return found


def compare(baseline: Mapping[str, Any], current: Mapping[str, Any], thresholds: Thresholds) -> list[Comparison]:
    """Verdicts for every benchmark in either run, SLOWER first."""
    base, cur = entries(baseline), entries(current)
    out = []
    for name in sorted(set(base) | set(cur)):
        b, c = base.get(name), cur.get(name)
        if b is None:
            out.append(Comparison(name, "NEW", None, c))
            continue
        if c is None:
            out.append(Comparison(name, "MISSING", b, None))
            continue
        change = c.median_s / b.median_s - 1
        threshold, noise = thresholds.for_entry(c), b.spread + c.spread
        limit = max(threshold, noise)
        verdict = "SLOWER" if change > limit else "FASTER" if change < -limit else "SAME"
        out.append(Comparison(name, verdict, b, c, change, threshold, noise))
    return sorted(out, key=lambda x: (VERDICTS.index(x.verdict), x.name))


def regressions(comparisons: Iterable[Comparison]) -> list[Comparison]:
    return [c for c in comparisons if c.verdict == "SLOWER"]
