"""The verdicts' one vocabulary (pytest_attn.verdicts.verdict): each word knows its meaning and whether it fails a
run by default, and is written as its name wherever a report goes."""

from __future__ import annotations

import csv
import io
import json

import pytest

from pytest_attn.verdicts.verdict import (
    DEFAULT_FAIL_ON,
    FAILABLE,
    ORDER,
    WORDS,
    Verdict,
    fail_on_help,
    parse_fail_on,
)


def test_every_verdict_has_one_word_and_the_failing_kinds_come_first():
    assert set(WORDS) == set(Verdict)
    assert DEFAULT_FAIL_ON == (Verdict.SLOWER, Verdict.TIMER, Verdict.MISSING)
    assert ORDER.index(Verdict.MISSING) < ORDER.index(Verdict.AMBIGUOUS) < ORDER.index(Verdict.SAME)
    assert Verdict.SAME not in FAILABLE and Verdict.NEW not in FAILABLE
    assert [v for v in Verdict if v.decided] == [Verdict.SLOWER, Verdict.CLOCK, Verdict.FASTER, Verdict.SAME]
    assert [v for v in Verdict if v.uncompared] == [Verdict.TIMER, Verdict.MISSING, Verdict.UNSELECTED]


def test_a_verdict_is_written_as_its_name():
    v = Verdict.AMBIGUOUS
    assert v == "AMBIGUOUS" and f"{v}" == "AMBIGUOUS" and f"{v:>10}" == " AMBIGUOUS" and str(v) == "AMBIGUOUS"
    assert json.dumps({"verdict": v}) == '{"verdict": "AMBIGUOUS"}'
    out = io.StringIO()
    csv.writer(out).writerow([v])
    assert out.getvalue().strip() == "AMBIGUOUS"


def test_fail_on_names_only_failable_verdicts_and_its_help_comes_from_them():
    assert parse_fail_on("slower, Missing") == (Verdict.SLOWER, Verdict.MISSING)
    with pytest.raises(ValueError, match="give one or more of slower, timer, missing, clock"):
        parse_fail_on("same")
    assert fail_on_help() == ("verdicts that fail the run: slower,timer,missing (default), clock, ambiguous, faster,"
                              " unselected")
