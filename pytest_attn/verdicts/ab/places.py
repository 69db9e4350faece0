"""How far where an arm's data sit moves each case, pooled over paired A/B runs (their ``ab.json``).

Each replica set-up of a case (a stratum: one replica of each arm, at one place) has its own mean B/A; what
those means differ by beyond their own noise is the places' (:func:`~pytest_attn.core.stats.placement_variance`
says it for one run). Pooled over runs, it says which cases two draws of place per arm leave undecided: a case
whose places move it by a quarter of the threshold or more (0.5 % at 2 %) tends to stay AMBIGUOUS at
``--attn-max-time=1`` and is worth more time (``scripts/ab_places.py``; an H100's:
docs/gpu-validation.md#the-paired-ab). Pure: fed with :class:`~.paired.AbResult`."""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from ...core.stats import log_ratios_by_stratum
from .paired import AbResult


@dataclass(frozen=True)
class PlaceSpread:
    name: str  # the test, without its file
    sd: float  # one replica set-up's place, as a relative SD of the case's time (a stratum's B/A holds two)
    set_ups: int  # the replica set-ups it is taken from (two pairs or more each), over the runs
    runs: int


def place_spread(results: Iterable[AbResult]) -> list[PlaceSpread]:
    """Each case's place SD over the runs' results (one per case and run), largest first; cases with fewer
    than two set-ups of two pairs in every run are left out. A run's variance beyond noise (the stratum means'
    variance less their mean squared error) is pooled by its degrees of freedom, set-ups - 1; a stratum's B/A
    is the ratio of two places, so one place's variance is half of it. Not
    :func:`~pytest_attn.core.stats.placement_variance` run by run: it clamps each run at zero (right for one
    verdict), which pooled would read still places as moving; and it keeps strata of one pair."""
    pooled: dict[str, list[tuple[int, float]]] = {}
    for r in results:
        a_s, b_s = r.judged_blocks()
        if len(r.replicas) != len(a_s):
            continue
        kept = [g for g in log_ratios_by_stratum(a_s, b_s, r.replicas).values() if len(g) >= 2]
        if len(kept) < 2:
            continue
        means = [sum(g) / len(g) for g in kept]
        centre = sum(means) / len(means)
        between = sum((m - centre) ** 2 for m in means) / (len(means) - 1)
        within = sum(sum((v - m) ** 2 for v in g) / (len(g) - 1) / len(g) for g, m in zip(kept, means,
                                                                                           strict=True))
        pooled.setdefault(r.name.split("::")[-1], []).append((len(means), between - within / len(means)))
    out = []
    for name, runs in pooled.items():
        dof = sum(n - 1 for n, _ in runs)
        var = sum((n - 1) * v for n, v in runs) / dof
        out.append(PlaceSpread(name, math.sqrt(max(0.0, var) / 2), sum(n for n, _ in runs), len(runs)))
    return sorted(out, key=lambda p: (-p.sd, p.name))
