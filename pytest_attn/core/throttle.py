"""Throttling seen while sampling: NVML's clocks-event reasons and SM clocks per sample, classified.
Pure: the engine reads the bits, this module says what they mean.

A sample is *throttled* when NVML gave a reason that lowers clocks against the user's will -- power
cap, thermal (software or hardware), hardware slowdown, power brake -- before or after it. Idle,
application-clock settings, sync boost and display clocks are reported but are not throttling. As
nvbench does, samples taken under 75 % of the nominal (maximum) SM clock can be dropped
(``--attn-drop-throttled``); the count is reported.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

REASONS: dict[int, str] = {
    0x1: "idle",
    0x2: "applications clocks setting",
    0x4: "power cap",
    0x8: "hardware slowdown",
    0x10: "sync boost",
    0x20: "thermal (software)",
    0x40: "thermal (hardware)",
    0x80: "power brake",
    0x100: "display clock setting",
}
THROTTLING = 0x4 | 0x8 | 0x20 | 0x40 | 0x80
DROP_BELOW = 0.75  # of the nominal clock, as nvbench
MOSTLY = 0.5


def reason_names(mask: int | None) -> list[str]:
    if not mask:
        return []
    return [name for bit, name in REASONS.items() if mask & bit]


def is_throttled(mask: int | None) -> bool:
    return bool(mask and mask & THROTTLING)


@dataclass(frozen=True)
class ThrottleReport:
    samples: int
    throttled: int
    reasons: dict[str, int] = field(default_factory=dict)  # throttling reason -> samples
    dropped: int = 0
    known: bool = True  # False when NVML gave no reasons at all

    @property
    def fraction(self) -> float:
        return self.throttled / self.samples if self.samples else 0.0

    @property
    def mostly_throttled(self) -> bool:
        return self.known and self.fraction > MOSTLY

    def describe(self) -> str:
        if not self.known:
            return "throttling not known (NVML gave no clocks-event reasons)"
        why = ", ".join(f"{name} {n}" for name, n in sorted(self.reasons.items(), key=lambda kv: -kv[1]))
        text = f"{self.throttled}/{self.samples} samples throttled" + (f" ({why})" if why else "")
        return text + (f"; {self.dropped} dropped under {DROP_BELOW:.0%} of the nominal clock" if self.dropped else "")



def assess(
    reasons: Sequence[int | None],
    clocks: Sequence[int | None],
    nominal_mhz: int | None,
    *,
    drop: bool = False,
) -> tuple[list[int], ThrottleReport]:
    """Indices of the samples to keep, and the report. ``reasons`` and ``clocks`` hold one entry per
    sample (None where NVML could not say). With ``drop``, samples under 75 % of ``nominal_mhz`` go,
    unless that would leave none."""
    n = len(reasons)
    counts: dict[str, int] = {}
    throttled = 0
    for mask in reasons:
        if is_throttled(mask):
            throttled += 1
            for name in reason_names((mask or 0) & THROTTLING):
                counts[name] = counts.get(name, 0) + 1
    keep = list(range(n))
    if drop and nominal_mhz:
        floor = DROP_BELOW * nominal_mhz
        kept = [i for i in keep if clocks[i] is None or (clocks[i] or 0) >= floor]
        keep = kept or keep
    known = any(r is not None for r in reasons)
    return keep, ThrottleReport(n, throttled, counts, n - len(keep), known)
