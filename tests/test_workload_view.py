"""The workload view: a step's attention time per back end (median x count over every record), call-site
shares, MFU over the step, the fastest back end per record -- and no total for a back end that missed a record."""

from __future__ import annotations

import pytest
from factories import record

from pytest_attn.core.replay import replay
from pytest_attn.core.workload import Call, Workload, WorkloadRecord
from pytest_attn.verdicts.workload_view import fastest_per_record, step_totals, workload_lines

PREFILL = Call("sdpa", 1, 64, 64, 4, 2, 16, 16, "bf16", "causal", is_causal=True)
DECODE = Call("sdpa", 1, 1, 65, 4, 2, 16, 16, "bf16")
DROPOUT = Call("sdpa", 1, 8, 8, 4, 4, 16, 16, "bf16", unsupported="dropout_p=0.5: no dropout here")
W = Workload("m", (WorkloadRecord(PREFILL, 2, 0, ("model.layers.0.attn", "model.layers.1.attn")),
                   WorkloadRecord(DECODE, 6, 1, ("model.layers.0.attn",)),
                   WorkloadRecord(DROPOUT, 3, 2, ("head.attn",))))
R = replay(W, "m.json")


def result(backend: str, index: int, median_s: float):
    return record(backend, median_s, case=R.variants[index][1].case(backend))


def test_a_step_is_each_records_median_times_its_count_and_mfu_is_over_the_step():
    results = [result("a", 0, 1e-3), result("a", 1, 1e-4), result("b", 0, 2e-3), result("b", 1, 5e-5)]
    a, b = step_totals(R, results)
    assert a.time_s == pytest.approx(2 * 1e-3 + 6 * 1e-4) and b.time_s == pytest.approx(2 * 2e-3 + 6 * 5e-5)
    flops = 2 * results[0].work.flops + 6 * results[1].work.flops
    assert a.mfu == pytest.approx(flops / a.time_s / (results[0].figures.peak_tflops * 1e12))
    assert a.sites == (("model.layers.*.attn", pytest.approx(2.6e-3)),)
    best, won, unrun = fastest_per_record(R, results)
    assert best == pytest.approx(2 * 1e-3 + 6 * 5e-5) and won == {"a": 1, "b": 1} and unrun == ()


def test_a_back_end_that_missed_a_record_gets_no_total_and_the_missing_record_is_named():
    results = [result("a", 0, 1e-3), result("a", 1, 1e-4), result("b", 0, 2e-3)]
    lines = workload_lines([R], results)
    text = "\n".join(lines)
    assert "b: no step total: it did not run r1" in text
    assert not any(line.startswith("  b: ") and "per step" in line for line in lines)
    assert "a: 2.600 ms of attention per step" in text
    assert "leaves out 1 record(s) (3 call(s)) that cannot be replayed: r2 (sdpa at head.attn, x3): dropout_p=0.5"\
        in text
    assert "fastest back end per record: 2.600 ms per step" in text


def test_no_fastest_total_when_a_record_ran_nowhere():
    lines = workload_lines([R], [result("a", 0, 1e-3)])
    assert lines[-1] == "  fastest back end per record: no step total: no back end ran r1"
