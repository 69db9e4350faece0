"""``--attn-shard=I/N``: the I-th of N shares of a run's problems, for runners (or GPU groups) that each run one;
``pytest-attn merge`` joins their JSON.

The shares are balanced by each problem's expected cost (:func:`~..core.schedule.shares`: longest first, to the
share with the least so far), a problem's back ends kept together. The costs are the gated baseline's times (the
committed file, the same on every runner of a GPU model), else the model of each case's work; never a saved run,
which runners hold differently -- two runners must draw the same lines. Dealt by name in turn instead, the
workflow's two shards took 62.5 and 99.5 s on 4 x H200 (docs/gpu-validation.md#how-long-it-takes).

A share's JSON records (``attn_shard``) its index, the count, the number of problems, a digest of the selection and
of the shares, and where the costs came from: a merge tells a missing shard, and shards drawn from other costs
(``selection`` differs).
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from ..core.case import AttnCase
from ..core.schedule import CPU_RATES, GPU_RATES, case_facts, expected_cost, shares
from .scheduling import baseline_times
from .session import ATTN_SESSION, VISIBLE_GPUS


def problem_costs(config: pytest.Config, cases: Sequence[tuple[str, AttnCase]]) -> tuple[dict[str, float], str]:
    """Each problem's expected seconds from its cases (``(record name, case)``), and where they came from."""
    baseline, where = baseline_times(config) if ATTN_SESSION in config.stash else ({}, "")
    rates = GPU_RATES if config.stash.get(VISIBLE_GPUS, []) else CPU_RATES
    costs: dict[str, float] = {}
    sources = set()
    for name, case in cases:
        cost = expected_cost(case_facts(name, case), baseline, {}, rates)
        costs[case.group] = costs.get(case.group, 0.0) + cost.seconds
        sources.add(f"the baseline {where}" if cost.source == "baseline" else cost.source)
    return costs, " and ".join(sorted(sources)) or "none"


def share(config: pytest.Config, index: int, count: int,
          cases: Sequence[tuple[str, AttnCase]]) -> tuple[set[str], dict[str, Any]]:
    """The problems of share ``index`` of ``count``, and the mark its JSON records."""
    costs, source = problem_costs(config, cases)
    drawn = shares(costs, count)
    return {g for g, i in drawn.items() if i == index}, shard_mark(index, count, sorted(costs), drawn, source)


def shard_mark(index: int, count: int, groups: Sequence[str], drawn: Mapping[str, int] | None = None,
               costs: str = "") -> dict[str, Any]:
    """What a shard's JSON records (``attn_shard``): which share it is, of how many, and of which selection and
    shares (a digest of every problem the selection held before sharding, and of the share each went to), so a
    merge can tell a missing or a foreign shard. Pure."""
    lines = [f"{g}\t{drawn[g]}" if drawn else g for g in groups]
    digest = hashlib.sha256("\n".join(lines).encode()).hexdigest()[:12]
    mark: dict[str, Any] = {"index": index, "count": count, "problems": len(groups), "selection": digest}
    return {**mark, "costs": costs} if costs else mark
