"""``--attn-shard=I/N`` (pytest_attn.plugin.sharding): shares drawn by each problem's expected cost -- the gated
baseline's times, else the model of its work -- and a mark that tells shares drawn from other costs. Pure but for
a stand-in config; the split through real runs is tests/test_workers.py's."""

from __future__ import annotations

import pytest

from pytest_attn.core.case import AttnCase
from pytest_attn.plugin import sharding
from pytest_attn.plugin.session import ATTN_SESSION, VISIBLE_GPUS


class _Config:
    def __init__(self) -> None:
        self.stash = pytest.Stash()
        self.stash[VISIBLE_GPUS] = []
        self.stash[ATTN_SESSION] = None  # type: ignore[assignment]  # (baseline_times is replaced)


def _case(backend: str, shape: str, seqlen: int) -> tuple[str, AttnCase]:
    case = AttnCase(backend, shape, (seqlen,), (seqlen,), 8, 8, 64, 64)
    return f"t.py::test[{case.id}]", case


BIG, MID, SMALL = "big-bf16-full-fwd", "mid-bf16-full-fwd", "small-bf16-full-fwd"


CASES = [_case("sdpa-flash", "big", 4096), _case("flex", "big", 4096), _case("sdpa-flash", "mid", 2048),
         _case("sdpa-flash", "small", 512), _case("flex", "small", 512)]


def test_without_a_baseline_the_model_of_the_work_draws_the_shares(monkeypatch):
    monkeypatch.setattr(sharding, "baseline_times", lambda config: ({}, ""))
    costs, source = sharding.problem_costs(_Config(), CASES)  # type: ignore[arg-type]
    assert source == "model" and costs[BIG] > costs[MID] > costs[SMALL]
    one, mark = sharding.share(_Config(), 1, 2, CASES)  # type: ignore[arg-type]
    two, _ = sharding.share(_Config(), 2, 2, CASES)  # type: ignore[arg-type]
    assert one == {BIG} and two == {MID, SMALL}  # the longest alone; the rest together
    assert (mark["index"], mark["count"], mark["problems"], mark["costs"]) == (1, 2, 3, "model")


def test_the_baselines_times_draw_the_shares_where_it_has_them(monkeypatch):
    times = {f"t.py::test[sdpa-flash-{SMALL}]": 50.0, f"t.py::test[flex-{SMALL}]": 40.0}  # the small one is long
    monkeypatch.setattr(sharding, "baseline_times", lambda config: (times, "b.json"))
    costs, source = sharding.problem_costs(_Config(), CASES)  # type: ignore[arg-type]
    assert costs[SMALL] == 90.0 and source == "model and the baseline b.json"
    one, mark = sharding.share(_Config(), 1, 2, CASES)  # type: ignore[arg-type]
    assert one == {SMALL}
    monkeypatch.setattr(sharding, "baseline_times", lambda config: ({}, ""))
    _, other = sharding.share(_Config(), 1, 2, CASES)  # type: ignore[arg-type]
    assert mark["selection"] != other["selection"]  # drawn from other costs: a merge refuses them together


def test_a_mark_digests_the_selection_and_its_shares():
    groups = ["a", "b", "c"]
    plain = sharding.shard_mark(1, 2, groups)
    assert plain == {"index": 1, "count": 2, "problems": 3, "selection": plain["selection"]}
    drawn = sharding.shard_mark(1, 2, groups, {"a": 1, "b": 2, "c": 2}, "model")
    assert drawn["selection"] == sharding.shard_mark(2, 2, groups, {"a": 1, "b": 2, "c": 2}, "model")["selection"]
    assert drawn["selection"] != sharding.shard_mark(1, 2, groups, {"a": 2, "b": 1, "c": 1}, "model")["selection"]
    assert drawn["selection"] != plain["selection"] and drawn["costs"] == "model"
