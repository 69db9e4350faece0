"""The gate's verdicts (pytest_attn.verdicts.gate) and the runs they read (pytest_attn.verdicts.runs), on
a recorded H200 run (tests/data: four results of
the smoke profile, recorded on an H200 before fingerprints existed; its fingerprint is written in the
form this version records, and max_seqlen_k is taken from each result's attn_case)."""

from __future__ import annotations

import copy
import json
from pathlib import Path

import pytest

from pytest_attn.verdicts.gate import Thresholds, compare, parse_fraction, parse_override, regressions
from pytest_attn.verdicts.runs import benches

RECORDED = Path(__file__).parent / "data" / "h200_smoke_subset.json"
HUNYUAN = "test_prefill[flash-attn-hunyuan-video-bf16-full-fwd]"
DECODE = "test_decode[flash-attn-kvcache-qwen2.5-7b-decode-k4096-bf16-causal-fwd]"


@pytest.fixture
def run():
    return json.loads(RECORDED.read_text())


def _scale(run, name, factor, precision=None):
    out = copy.deepcopy(run)
    for b in out["benchmarks"]:
        if name in b["fullname"]:
            b["stats"]["median"] *= factor
            if precision is not None:
                b["extra_info"]["precision"] = precision
    return out


def _verdicts(base, cur, thresholds=None):
    return {c.name.split("::")[-1]: c.verdict for c in compare(benches(base), benches(cur), thresholds or Thresholds())}


def test_same_run_is_same(run):
    assert set(_verdicts(run, copy.deepcopy(run)).values()) == {"SAME"}


def test_slower_beyond_noise_and_faster(run):
    v = _verdicts(run, _scale(run, HUNYUAN, 1.08))  # +8 %; spreads 1.2 % + 1.2 %
    assert v[HUNYUAN] == "SLOWER" and list(v.values()).count("SAME") == 3
    assert _verdicts(run, _scale(run, DECODE, 0.9))[DECODE] == "FASTER"


def test_slower_within_noise_is_same(run):
    noisy_base = _scale(run, HUNYUAN, 1.0, precision=0.05)
    assert _verdicts(noisy_base, _scale(run, HUNYUAN, 1.08, precision=0.05))[HUNYUAN] == "SAME"  # 8 % < 10 % noise
    assert _verdicts(run, _scale(run, HUNYUAN, 1.04))[HUNYUAN] == "SAME"  # under the 5 % threshold


def test_new_and_missing(run):
    fewer = copy.deepcopy(run)
    fewer["benchmarks"] = [b for b in fewer["benchmarks"] if DECODE not in b["fullname"]]
    assert _verdicts(fewer, run)[DECODE] == "NEW"
    assert _verdicts(run, fewer)[DECODE] == "MISSING"
    assert not regressions(compare(benches(run), benches(fewer), Thresholds()))


def test_thresholds_per_backend_and_group(run):
    slower = _scale(run, HUNYUAN, 1.08)
    loose = Thresholds.build(0.05, [parse_override("backend:flash-attn=10%")])
    assert _verdicts(run, slower, loose)[HUNYUAN] == "SAME"
    group = next(b["group"] for b in run["benchmarks"] if HUNYUAN in b["fullname"])
    tight = Thresholds.build(0.2, [parse_override(f"group:{group}=3%")])
    assert _verdicts(run, slower, tight)[HUNYUAN] == "SLOWER"
    assert parse_fraction("5%") == parse_fraction("0.05") == 0.05
    with pytest.raises(ValueError, match="must look like backend:NAME=10%"):
        parse_override("flex=10%")
    with pytest.raises(ValueError, match="is not a number or a percentage"):
        parse_fraction("fast")


def test_spread_falls_back_to_the_iqr_without_pytest_attn_precision(run):
    plain = copy.deepcopy(run)
    for b in plain["benchmarks"]:
        del b["extra_info"]["precision"]
    e = benches(plain)[next(iter(benches(plain)))]
    b = next(x for x in plain["benchmarks"] if x["fullname"] == e.name)
    assert e.spread == pytest.approx(b["stats"]["iqr"] / 2 / b["stats"]["median"])




def test_a_threshold_override_must_name_a_known_back_end():
    t = Thresholds.build(0.05, [parse_override("backend:fa9=5%"), parse_override("backend:flex=10%")])
    assert t.unknown(["flex", "flash-attn"]) == ["backend:fa9"]


def test_records_are_read_back_from_a_run_and_legacy_runs_still_gate(run):
    from factories import record

    from pytest_attn.plugin.benchjson import benchmark_entry

    r = record("flash-attn", 1e-3, test="suites/test_prefill.py::test_prefill[x]", precision=0.02)
    new = {"benchmarks": [benchmark_entry(r)]}
    read = benches(new)[r.name]
    assert read.record == r and read.spread == 0.02 and read.backend == "flash-attn" and read.median_s == 1e-3
    legacy = benches(run)  # flat extra_info, written before the record existed: no record, still a median
    assert all(b.record is None and b.median_s > 0 and b.backend for b in legacy.values())
