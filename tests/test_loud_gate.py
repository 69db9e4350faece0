"""The gate's silent greens made loud, as pure functions (issue 55; the sessions are tests/test_silent_greens.py):
MISSING told from UNSELECTED by the run's selection, what a run that compared nothing differs in, the report's
headline, the numbers a stored baseline must hold, and names from a file printed as text."""

from __future__ import annotations

import copy
import dataclasses
import math
import re

import pytest
from factories import H200, record

from pytest_attn.core.case import AttnCase, Mask
from pytest_attn.plugin.benchjson import benchmark_entry
from pytest_attn.verdicts.baseline import BaselineError, check_run
from pytest_attn.verdicts.decision import gate
from pytest_attn.verdicts.fingerprint import fingerprint_of
from pytest_attn.verdicts.layout import printable
from pytest_attn.verdicts.render import md_code
from pytest_attn.verdicts.reports import HEADER, headline, markdown
from pytest_attn.verdicts.rule import Comparison, Thresholds
from pytest_attn.verdicts.runs import Bench
from pytest_attn.verdicts.selection import Selection
from pytest_attn.verdicts.table import render
from pytest_attn.verdicts.verdict import DEFAULT_FAIL_ON

FP = fingerprint_of(H200)


def _case(backend: str, shape: str = "gpt2-small", dtype: str = "bf16") -> AttnCase:
    return AttnCase.dense(backend=backend, shape=shape, batch=8, seqlen_q=1024, heads_q=12, head_dim=64,
                          mask=Mask.causal(), dtype=dtype)


def _record(name: str, backend: str = "fa4", median_s: float = 1e-3, **case):
    return record(backend, median_s, case=_case(backend, **case), test=name)


def _run(*records):
    return {"benchmarks": [benchmark_entry(r) for r in records],
            "machine_info": {"attn_fingerprint": FP.as_dict()}}


# ---- 2: MISSING (selected, not measured) apart from UNSELECTED --------------------------------------------------
def test_a_baseline_case_the_run_selected_and_did_not_measure_fails_with_why():
    base = _run(_record("suites/test_prefill.py::test_prefill[fa4-a]"),
                _record("suites/test_prefill.py::test_prefill[fa4-b]"),
                _record("suites/test_decode.py::test_decode[fa4-c]"))
    mine = [_record("suites/test_prefill.py::test_prefill[fa4-a]")]
    selection = Selection(frozenset({"suites/test_prefill.py::test_prefill[fa4-a]",
                                     "suites/test_prefill.py::test_prefill[fa4-b]"}),
                          {"suites/test_prefill.py::test_prefill[fa4-b]": "skipped: flash_attn.cute import failed"})
    outcome = gate(mine, base, "b.json", FP, Thresholds(), selection=selection)
    verdicts = {c.name.split("[")[-1]: c.verdict for c in outcome.comparisons}
    assert verdicts == {"fa4-a]": "SAME", "fa4-b]": "MISSING", "fa4-c]": "UNSELECTED"}
    assert outcome.status == "fail" and "MISSING" in DEFAULT_FAIL_ON
    assert "  test_prefill[fa4-b]: not measured: skipped: flash_attn.cute import failed" in outcome.lines
    assert outcome.lines[-1] == "failed: 1 MISSING (--attn-fail-on=slower,timer,missing)"
    assert gate(mine, base, "b.json", FP, Thresholds(), ("SLOWER", "TIMER"), selection=selection).status == "pass"
    unknown = gate(mine, base, "b.json", FP, Thresholds())  # a merge of shards: what they selected is not known
    assert {c.verdict for c in unknown.comparisons} == {"SAME", "UNSELECTED"} and unknown.status == "pass"
    assert any("this run's selection is not known" in n for n in unknown.notes)


# ---- 3: nothing compared ----------------------------------------------------------------------------------------
def test_a_run_that_compared_nothing_names_what_its_selection_differs_in():
    base = _run(*(_record(f"suites/test_prefill.py::test_prefill[{b}-hunyuan-video]", b, shape="hunyuan-video")
                  for b in ("fa4", "flash-attn")))
    mine = [_record("suites/test_prefill.py::test_prefill[sdpa-math-tiny-mha]", "sdpa-math", shape="tiny-mha",
                    dtype="fp32")]
    selection = Selection(frozenset(r.name for r in mine), backends=("sdpa-math",), dtypes=("fp32",), profile="cpu")
    outcome = gate(mine, base, "baselines/nvidia-h200/baseline.json", FP, Thresholds(), named=False,
                   selection=selection)
    assert outcome.status == "fail"
    said = outcome.lines[-1]
    assert said.startswith("error: no case of this run is in the baseline baselines/nvidia-h200/baseline.json (2 cases"
                           " there, 1 here): nothing was compared. This run selected suites/test_prefill.py (2 cases"
                           " there); the baseline holds back ends fa4, flash-attn (this run selected sdpa-math);"
                           " dtypes bf16 (this run: fp32); problems of --attn-profile=default or full or sustained"
                           " (hunyuan-video; this run's profile is cpu), which this run did not select."), said
    assert ("Run the baseline's selection (--attn-backends=fa4,flash-attn --attn-dtypes=bf16 --attn-profile=default);"
            " or run without a gate (--attn-baseline=off)") in said
    elsewhere = [dataclasses.replace(mine[0], test="tests/test_mine.py::test_it[sdpa-math-tiny-mha]")]
    other = gate(elsewhere, base, "b.json", FP, Thresholds(), named=False,
                 selection=Selection(frozenset({elsewhere[0].name})))
    assert other.status == "pass" and other.lines[0].startswith("NOT GATED: no case of this run is in the baseline")
    assert "this run selected none of those test files (it ran tests/test_mine.py)" in other.lines[0]


# ---- 4: the headline ------------------------------------------------------------------------------------------
def _comparisons(**counts: int) -> list[Comparison]:
    b = Bench("x", "g", "fa4", 1e-3, 0.01)
    return [Comparison(f"{verdict}{i}", verdict, None if verdict == "NEW" else b, None if verdict in (
        "MISSING", "UNSELECTED") else b) for verdict, n in counts.items() for i in range(n)]


def test_the_headline_says_no_regression_only_where_cases_were_compared_and_none_failed():
    assert headline(_comparisons(NEW=3)) == "not gated: no baseline"
    assert markdown(_comparisons(NEW=3), "none").startswith("### pytest-attn: not gated: no baseline (3 NEW)")
    assert headline(_comparisons(UNSELECTED=5, NEW=2)) == "not gated: nothing compared (5 UNSELECTED)"
    assert headline(_comparisons(AMBIGUOUS=206)) == \
        "no verdict on any of 206 cases; 206 AMBIGUOUS: not a pass you can trust"
    assert headline(_comparisons(SAME=3, AMBIGUOUS=203)) == \
        "no regression in 3 of 206 cases; 203 AMBIGUOUS: not a pass you can trust"
    assert headline(_comparisons(SAME=206)) == "no regression in 206 of 206 cases"
    assert headline(_comparisons(SAME=4, UNSELECTED=2), ()) == \
        "no regression in 4 of 6 cases; 2 UNSELECTED not compared"
    assert headline(_comparisons(SLOWER=1, SAME=2)) == "regression"


# ---- 5: the numbers of a stored baseline that feed a verdict ----------------------------------------------------
def _stored(**timing):
    r = _record("suites/test_prefill.py::test_prefill[fa4-a]")
    run = _run(r)
    run["benchmarks"][0]["extra_info"]["timing"].update(timing)
    return run


@pytest.mark.parametrize(("change", "said"), [
    ({"precision": -0.05}, "timing.precision -0.05, not a number of 0 or more"),  # made a 300 % slowdown AMBIGUOUS
    ({"precision": 1e300}, "timing.precision 1e+300, past 100"),  # overflowed the noise at the session's end
    ({"precision": "nan"}, "timing.precision 'nan', not a number of 0 or more"),
    ({"precision": "inf"}, "timing.precision inf with 10 samples (it is inf only for a median of fewer than 5)"),
    ({"precision": True}, "timing.precision True, not a number"),
    ({"calls_per_sample": 0}, "timing.calls_per_sample 0, not a whole number of 1 or more"),
    ({"host_gap": 2.0}, "timing.host_gap 2.0, not a share between 0 and 1"),
    ({"median_s": -1e-3}, "timing.median_s -0.001, not a finite positive number"),
])
def test_a_stored_number_that_would_blind_the_gate_is_refused_naming_it(change, said):
    with pytest.raises(BaselineError, match="benchmark 'suites/test_prefill.py::test_prefill.fa4-a.' has "
                       + _escaped(said)):
        check_run(_stored(**change), "baseline b.json")


def _escaped(text: str) -> str:
    return re.escape(text)


def test_a_stored_median_off_its_record_a_clock_and_an_unknown_schema_are_refused():
    far = _stored()
    far["benchmarks"][0]["stats"]["median"] = 1e300  # against repeats of a millisecond: used as it was
    with pytest.raises(BaselineError, match=r"stats.median 1e\+300 s, [\d.e+]+x off its record's timing.median_s"):
        check_run(far, "b.json")
    repeats = _stored(repeats_s=[1e-3, 1.01e-3, 0.99e-3])
    repeats["benchmarks"][0]["stats"]["median"] = 3e-3
    with pytest.raises(BaselineError, match="3x off the median of its repeats"):
        check_run(repeats, "b.json")
    clock = _stored()
    clock["benchmarks"][0]["extra_info"]["clocks"]["sm_clock_mhz"] = -1980
    with pytest.raises(BaselineError, match=r"clocks\.sm_clock_mhz -1980, not a finite positive number of MHz"):
        check_run(clock, "b.json")
    newer = _stored()
    newer["benchmarks"][0]["extra_info"]["schema"] = "pytest-attn.record/2"  # read as plain pytest-benchmark JSON
    schema = "holds a result record of schema 'pytest-attn.record/2' (version 1); this pytest-attn reads schema"
    with pytest.raises(BaselineError, match=_escaped(f"{schema} 'pytest-attn.record' version 1")):
        check_run(newer, "b.json")
    legacy = {"benchmarks": [{"name": "t", "stats": {"median": 1e-3}, "extra_info": {"precision": -1}}]}
    with pytest.raises(BaselineError, match=r"extra_info\.precision -1, not a number from 0 to 100"):
        check_run(legacy, "b.json")
    few = _stored(precision="inf", samples_s=[1e-3] * 3)  # what the codec writes for fewer than 5 samples
    assert check_run(few, "b.json") is few
    assert math.isfinite(check_run(_stored(), "b.json")["benchmarks"][0]["extra_info"]["timing"]["precision"])


# ---- 7: names from a file ------------------------------------------------------------------------------------
FAKE = "suites/test_prefill.py::test_prefill[fa4-x\x1b[2J\x1b[31m\nSLOWER | all | fine\r\u202e]"


def test_a_name_from_a_file_is_printed_as_text_never_as_terminal_control():
    base = _run(_record(FAKE), _record("suites/test_prefill.py::test_prefill[fa4-a]"))
    mine = [_record("suites/test_prefill.py::test_prefill[fa4-a]")]
    for selection in (None, Selection(frozenset({FAKE, mine[0].name}), {FAKE: "failed: \x1b[1mboom\nSLOWER"})):
        outcome = gate(mine, copy.deepcopy(base), "b.json", FP, Thresholds(), selection=selection)
        text = "\n".join(outcome.lines)
        assert not any(c in text for c in "\x1b\r\u202e"), text
        assert len(text.splitlines()) == len(outcome.lines) and not any(
            line.lstrip().startswith("SLOWER") for line in outcome.lines)
    assert printable(FAKE).endswith("fa4-x\\x1b[2J\\x1b[31m\\nSLOWER | all | fine\\r\\u202e]")
    merged = _record("suites/t.py::test[x]", backend="fa4\x1b[2J")  # a record read from a shard (pytest-attn merge)
    assert not any("\x1b" in line for line in render([merged], H200)), "the table prints a stored name raw"


def test_a_name_from_a_file_cannot_leave_its_code_span_or_its_cell_in_markdown():
    name = "suites/t.py::test[a`|**b**|<img src=x onerror=alert(1)>`]"
    b = Bench(name, "g", "fa4", 1e-3, 0.01)
    md = markdown([Comparison(name, "SAME", b, b, 0.0, 0.05, 0.01)], "b.json")
    row = next(line for line in md.splitlines() if "img" in line and line.startswith("|"))
    cells = [c for c in row.replace("\\|", "").split("|")]
    assert len(cells) == len(HEADER) + 2, row  # one cell per column: the name's pipes are escaped
    assert row.startswith("| ``test[a`\\|**b**\\|<img src=x onerror=alert(1)>`]`` |"), row  # one code span
    assert md_code("a``b") == "```a``b```" and md_code("plain") == "`plain`"
