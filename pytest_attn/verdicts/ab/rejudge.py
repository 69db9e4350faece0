"""A paired A/B's recorded pairs judged again by this version's rule (``scripts/ab_rejudge.py``): what a change
to the rule does to verdicts already measured, before any GPU time is spent. Pure."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass

from .paired import AB_THRESHOLD, AbResult, Paired, paired


def rejudge(result: AbResult, threshold: float = AB_THRESHOLD) -> Paired:
    """``result``'s pairs (every block, its clock and replica set-up, as ab.json keeps them) judged again,
    on the basis the run judged them (at equal clock where it measured the clocks)."""
    a_s, b_s = result.blocks
    a_mhz, b_mhz = result.block_mhz
    return paired(result.name, a_s, b_s, threshold, a_mhz, b_mhz, measured=result.clocks_measured,
                  replicas=result.replicas)


@dataclass(frozen=True)
class Changed:
    name: str
    recorded: str
    now: str
    change: float  # B/A - 1, now


def tally(results: Iterable[AbResult], threshold: float = AB_THRESHOLD) -> tuple[Counter[str], Counter[str],
                                                                                list[Changed]]:
    """(the recorded verdicts' counts, this rule's, the cases whose verdict it changes)."""
    recorded: Counter[str] = Counter()
    now: Counter[str] = Counter()
    changed = []
    for r in results:
        again = rejudge(r, threshold)
        recorded[r.paired.verdict] += 1
        now[again.verdict] += 1
        if again.verdict != r.paired.verdict:
            changed.append(Changed(r.name, r.paired.verdict, again.verdict, again.change))
    return recorded, now, changed
