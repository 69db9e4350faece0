"""A pytest-xdist worker that dies mid-run (SIGKILL, as the out-of-memory killer sends): the run never hangs, the
case it was running fails naming the worker, the rest of its problem runs elsewhere, and a run that xdist ends
early says how many tests never ran (the history's tally, named in the summary by
pytest_attn.plugin.workers.cut_short). Real worker processes, on a CPU."""

from __future__ import annotations

import json
import re

import pytest

pytest.importorskip("torch")
pytest.importorskip("xdist")

from factories import attention_suite

CONFTEST = """
import pytest

from pytest_attn.plugin import prepare_attention_run


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    prepare_attention_run(config)
"""
#: the suite's test, made to kill its own worker the first time it reaches one case
KILLER = attention_suite() + '''

import os
import signal
from pathlib import Path

_measure = test_attn


def test_attn(attn_bench, case):  # noqa: F811
    once = Path(__file__).parent / "killed-once"
    if case.id == "sdpa-math-tiny-mha-fp32-full-fwdbwd" and not once.exists():
        once.write_text(os.environ.get("PYTEST_XDIST_WORKER", ""))
        os.kill(os.getpid(), signal.SIGKILL)
    _measure(attn_bench, case)
'''
ARGS = ["-p", "no:cacheprovider", "--attn-profile=cpu", "--attn-backends=sdpa-math,sdpa-loop", "--attn-dtypes=fp32",
        "--attn-max-time=0.05", "--attn-min-samples=5", "-k", "tiny-mha or tiny-gqa", "-n", "2", "-v",
        "--benchmark-json=run.json"]
KILLED = "test_suite.py::test_attn[sdpa-math-tiny-mha-fp32-full-fwdbwd]"  # the longest problem: first out
REST = "test_suite.py::test_attn[sdpa-loop-tiny-mha-fp32-full-fwdbwd]"  # the other back end of its problem


def _ran_on(text: str) -> dict[str, str]:
    """Each test's worker, from ``-v``'s ``[gw0] [ 50%] PASSED t.py::x`` lines."""
    return {m[3]: m[1] for m in re.finditer(r"^\[(gw\d+)\] \[ *\d+%\] (PASSED|FAILED|SKIPPED) (\S+)", text, re.M)}


@pytest.mark.slow
def test_a_worker_killed_mid_run_fails_its_case_and_is_replaced(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=KILLER)
    result = pytester.runpytest_subprocess(*ARGS, timeout=600)  # a hang ends here as a failure, not at CI's limit
    text = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text
    dead = (pytester.path / "killed-once").read_text()
    assert f"worker '{dead}' crashed while running '{KILLED}': the worker process ended without a report" in text
    assert re.search(rf"replacing crashed worker {dead}", text)
    result.assert_outcomes(passed=7, failed=1)
    ran = _ran_on(text)
    assert ran[REST] != dead  # the rest of its problem ran on a live worker (or the replacement)
    measured = {b["fullname"] for b in json.loads((pytester.path / "run.json").read_text())["benchmarks"]}
    assert len(measured) == 7 and KILLED not in measured and REST in measured
    assert f"worker {dead}: " in text and f"died while running {KILLED}" in text  # the busy line says so
    assert "tests never ran" not in text  # the replacement ran what was left


@pytest.mark.slow
def test_a_run_xdist_ends_early_says_how_many_tests_never_ran(pytester):
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=KILLER)
    result = pytester.runpytest_subprocess(*ARGS, "--max-worker-restart=0", timeout=600)
    text = result.stdout.str()
    assert result.ret == pytest.ExitCode.TESTS_FAILED, text
    dead = (pytester.path / "killed-once").read_text()
    outcomes = result.parseoutcomes()
    never = 8 - outcomes.get("passed", 0) - outcomes.get("failed", 0)
    assert never > 0, text  # the longest problems went out first: the dead worker's rest, at least, never ran
    short = f"cut short (worker {dead} crashed and was not replaced; {never} of 8 tests never ran)"
    assert f"workers: {short}" in text and f"died while running {KILLED}" in text
    if outcomes.get("passed", 0) == 0:  # the dead worker was the first ready: nothing measured, and it says why
        assert f"measured nothing: {short}" in text
    else:  # what it measured is saved marked partial (plugin.history)
        assert json.loads((pytester.path / "run.json").read_text())["attn_partial"]["reason"] == short
