"""The noise-aware regression gate. Pure: the benchmarks of two runs in (:mod:`.runs`), verdicts out.

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

from ..core.percent import parse_percent
from .runs import Bench

VERDICTS = ("SLOWER", "FASTER", "SAME", "NEW", "MISSING")
DEFAULT_THRESHOLD = 0.05


def parse_fraction(text: str, what: str = "threshold") -> float:
    """``5%`` or ``0.05`` -> 0.05; more than 0, less than 1000 %."""
    return parse_percent(text, what, upper=10.0)


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

    def for_bench(self, bench: Bench) -> float:
        if bench.group in self.by_group:
            return self.by_group[bench.group]
        return self.by_backend.get(bench.backend, self.default)

    def unknown(self, backends: Iterable[str]) -> list[str]:
        """Back-end overrides that name none of ``backends``: a mistyped override never applies."""
        known = set(backends)
        return [f"backend:{name}" for name in self.by_backend if name not in known]


@dataclass(frozen=True)
class Comparison:
    name: str
    verdict: str
    baseline: Bench | None
    current: Bench | None
    change: float | None = None  # current / baseline - 1
    threshold: float | None = None
    noise: float | None = None

    @property
    def entry(self) -> Bench:
        found = self.current or self.baseline
        assert found is not None
        return found


def compare(base: Mapping[str, Bench], cur: Mapping[str, Bench], thresholds: Thresholds) -> list[Comparison]:
    """Verdicts for every benchmark in either run, SLOWER first."""
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
        threshold, noise = thresholds.for_bench(c), b.spread + c.spread
        limit = max(threshold, noise)
        verdict = "SLOWER" if change > limit else "FASTER" if change < -limit else "SAME"
        out.append(Comparison(name, verdict, b, c, change, threshold, noise))
    return sorted(out, key=lambda x: (VERDICTS.index(x.verdict), x.name))


def regressions(comparisons: Iterable[Comparison]) -> list[Comparison]:
    return [c for c in comparisons if c.verdict == "SLOWER"]
