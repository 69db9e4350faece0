"""Runs that used to pass silently without gating anything (issue 55, "the silent greens become loud"): each now
fails at start-up with the fix, gates, or fails naming what was not compared. End to end on the CPU profile, in
process, on a fake clock (as tests/test_gate_e2e.py): a back end ``steady`` whose calls advance the clock by a
steady 1 ms or so, and its twin ``other``, whose library can be made to fail its import (``OTHER_BROKEN``)."""

from __future__ import annotations

import json

import pytest

pytest.importorskip("torch")

from fake_clock_runs import on_the_fake_clock, steady_conftest, steady_suite

from pytest_attn.engine import probe

CONFTEST = steady_conftest(ms=1.0, twin="OTHER_BROKEN")

SUITE = steady_suite(stop=False)

#: The stored baseline is found as a user's is: baselines/<device-key>/baseline.json under the rootdir (no
#: --attn-baselines-dir, which asks for a gate by name).
ARGS = ["-p", "no:cacheprovider", "--attn-profile=cpu", "--attn-dtypes=fp32", "--attn-directions=fwd",
        "--attn-max-time=0.2"]
KEY = "cpu-test-cpu-9000"
STEADY, BOTH = "--attn-backends=steady", "--attn-backends=steady,other"
OK, FAILED, USAGE = pytest.ExitCode.OK, pytest.ExitCode.TESTS_FAILED, pytest.ExitCode.USAGE_ERROR


@pytest.fixture
def run(pytester, monkeypatch, fake_clock):
    on_the_fake_clock(monkeypatch, fake_clock)
    monkeypatch.setattr(probe, "cpu_model", lambda: "Test CPU 9000")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    return lambda *extra: pytester.runpytest(*ARGS, *extra)


def stored(pytester):
    return pytester.path / "baselines" / KEY / "baseline.json"


# ---- 1: --benchmark-disable ------------------------------------------------------------------------------------
def test_benchmark_disable_with_a_gate_stops_at_start_up_saying_where_it_came_from(run, pytester, monkeypatch):
    """In PYTEST_ADDOPTS (or addopts) it turned every case into a check: no gate, exit 0, even with 300 %
    injected; and --attn-save-baseline saved nothing, silently."""
    assert run(STEADY, "--attn-save-baseline").ret == OK
    monkeypatch.setenv("PYTEST_ADDOPTS", "--benchmark-disable")
    injected = run(STEADY, "--attn-inject-slowdown=300%")
    assert injected.ret == USAGE and "passed" not in injected.stdout.str()
    injected.stderr.fnmatch_lines(["*--benchmark-disable (in PYTEST_ADDOPTS) turns timing off (each case checked and"
                                   " run once, nothing measured), and --attn-inject-slowdown needs measured cases*"
                                   " to measure, add --benchmark-enable, which overrides it*"])
    gated = run(STEADY)  # no option asks for a gate: the stored baseline does
    assert gated.ret == USAGE and "passed" not in gated.stdout.str()
    gated.stderr.fnmatch_lines([f"*(in PYTEST_ADDOPTS)*, and a baseline for CPU Test CPU 9000 is stored at"
                                f" {stored(pytester)}, which gates every run*--attn-baseline=off*"])
    assert run(STEADY, "--attn-baseline=off").ret == OK  # a check without timing, asked for
    enabled = run(STEADY, "--attn-inject-slowdown=300%", "--benchmark-enable")
    assert enabled.ret == FAILED
    enabled.stdout.fnmatch_lines(["against * threshold: 3 SLOWER"])
    monkeypatch.delenv("PYTEST_ADDOPTS")
    pytester.makeini("[pytest]\naddopts = --benchmark-disable\n")
    saved = run(STEADY, "--attn-save-baseline")
    assert saved.ret == USAGE
    saved.stderr.fnmatch_lines(["*--benchmark-disable (in the addopts of *tox.ini) turns timing off*"
                                " --attn-save-baseline needs measured cases*"])


# ---- 2: MISSING (selected, not measured) apart from UNSELECTED -----------------------------------------------
def test_a_back_end_that_cannot_run_fails_the_gate_and_one_not_selected_does_not(run, monkeypatch):
    """A back end whose import broke left its cases MISSING, and the default --attn-fail-on passed: a pull request
    that breaks a kernel's import was green."""
    assert run(BOTH, "--attn-save-baseline").ret == OK
    monkeypatch.setenv("OTHER_BROKEN", "import other_kernels failed: libother.so: cannot open shared object file")
    broken = run(BOTH)
    assert broken.ret == FAILED
    broken.stdout.fnmatch_lines([
        "against * threshold: 3 MISSING, 3 AMBIGUOUS",  # (one repeat on a CPU: 5 % noise assumed)
        "  test_attn[[]other-tiny-gqa-causal-fp32-causal-fwd[]] * MISSING",
        "  test_attn[[]other-tiny-gqa-causal-fp32-causal-fwd[]]: not measured: skipped: import other_kernels failed:"
        " libother.so: cannot open shared object file",
        "  note: MISSING: a case of the baseline this run selected and did not measure fails the run*",
        "failed: 3 MISSING (--attn-fail-on=slower,timer,missing)"])
    narrowed = run(STEADY)  # the broken back end not selected: its cases reported, not failed
    assert narrowed.ret == OK
    narrowed.stdout.fnmatch_lines(["against * threshold: 3 AMBIGUOUS, 3 UNSELECTED",
                                   "  3 UNSELECTED: cases of the baseline this run did not select (another test file,"
                                   " -k, a back end or dtype not selected): not compared, not failed -- test_suite.py:"
                                   " 3"])
    assert run(BOTH, "-k", "steady").ret == OK  # -k leaves them out of the selection as well
    alone = run("--attn-backends=other")  # every selected case skipped: the gate never ran, and it must fail
    assert alone.ret == USAGE
    alone.stdout.fnmatch_lines(["error: measured nothing: of the 6 attention case(s) selected, 6 skipped (6 x import"
                                " other_kernels failed*); the run was asked for the gate against"
                                " */baseline.json (it holds 3 of the cases selected), which needs a measured case"])


# ---- 3: a run that compared nothing ------------------------------------------------------------------------------
def test_a_run_of_other_back_ends_fails_naming_them_and_another_suite_is_loudly_not_gated(run, pytester):
    """The README's recipe gated after changing --attn-backends said "not gated: no case of this run is in the
    baseline", exit 0."""
    assert run(STEADY, "--attn-save-baseline").ret == OK
    other = run("--attn-backends=other")
    assert other.ret == FAILED
    other.stdout.fnmatch_lines([
        f"error: no case of this run is in the baseline {stored(pytester)} (3 cases there, 3 here): nothing was"
        " compared. This run selected test_suite.py (3 cases there); the baseline holds back ends steady (this run"
        " selected other), which this run did not select. Run the baseline's selection (--attn-backends=steady); or"
        " run without a gate (--attn-baseline=off); or record a baseline for this selection (--attn-save-baseline"
        f" --attn-baselines-dir=DIR, then gate with --attn-baseline=DIR/{KEY}/baseline.json)"])
    pytester.makepyfile(test_elsewhere=SUITE)
    elsewhere = run(STEADY, "test_elsewhere.py", "--attn-report=rep")
    assert elsewhere.ret == OK
    elsewhere.stdout.fnmatch_lines([f"NOT GATED: no case of this run is in the baseline {stored(pytester)} (3 cases"
                                    " there, 3 here): nothing was compared. The baseline holds cases of"
                                    " test_suite.py; this run selected none of those test files (it ran"
                                    " test_elsewhere.py)*"])
    summary = (pytester.path / "rep" / "summary.md").read_text()
    assert summary.startswith("### pytest-attn: not gated: nothing compared (3 UNSELECTED)"), summary[:200]


# ---- 5 and 6: a stored baseline whose numbers would blind the gate, found through the baselines folder ------------
def test_a_stored_baseline_with_absurd_numbers_stops_the_run_before_the_first_case(run, pytester):
    """A precision of 1e300 crashed the session's end (OverflowError), after every case was measured; the same
    file named with --attn-baseline was refused at start-up. Both routes are refused at start-up now -- and only
    where an attention case is collected (the probe costs nothing elsewhere)."""
    assert run(STEADY, "--attn-save-baseline").ret == OK
    data = json.loads(stored(pytester).read_text())
    data["benchmarks"][0]["extra_info"]["timing"]["precision"] = 1e300
    stored(pytester).write_text(json.dumps(data))
    auto = run(STEADY)
    assert auto.ret == USAGE and "passed" not in auto.stdout.str()
    auto.stderr.fnmatch_lines([f"*the stored baseline for CPU Test CPU 9000: baseline {stored(pytester)}: benchmark"
                               " 'test_suite.py::test_*' has timing.precision 1e+300, past 100 (a median's 95% CI of"
                               " +-10000%): a verdict read from it would be blind or wrong*--attn-baseline=off*"])
    assert "Traceback" not in auto.stdout.str() + auto.stderr.str()
    nothing = run(STEADY, "-k", "no-such-case")  # no attention case collected: the baseline is not read
    assert nothing.ret == pytest.ExitCode.NO_TESTS_COLLECTED
    assert run(STEADY, "--attn-baseline=off").ret == OK


# ---- 8: --benchmark-compare's "vs saved" ------------------------------------------------------------------------
def test_vs_saved_judges_a_cpu_run_with_the_noise_the_gate_assumes_on_a_cpu(run, monkeypatch):
    """An A/A on a CPU showed SLOWER at +6 % in the "vs saved" column: it was judged with a GPU's 1 % noise, where
    the gate assumes 5 % on a CPU."""
    assert run(STEADY, "--attn-baseline=off", "--benchmark-autosave").ret == OK
    monkeypatch.setenv("TIMES_SLOWER", "1.06")
    compared = run(STEADY, "--attn-baseline=off", "--benchmark-compare")
    assert compared.ret == OK
    compared.stdout.fnmatch_lines(["vs saved: the median's change against * (--benchmark-compare): 3 AMBIGUOUS;*"])
    assert "% SLOWER" not in compared.stdout.str()
