"""--attn-workload end to end, in-process: each replayable record a case of its suite through the selected back
ends, the workload view in the summary; a bad file stops the run at start-up with a message valid from the
user's folder."""

from __future__ import annotations

import json

import pytest
from factories import attention_suite, dense

from pytest_attn.core.workload import VERSION, Call, Workload, WorkloadRecord, dumps
from pytest_attn.engine.settings import TooLongHere
from pytest_attn.plugin.hints import skip_reason

FAST = ("-p", "no:cacheprovider", "--attn-max-time=0.05", "--attn-min-samples=5", "--attn-backends=sdpa-math")
TINY = Workload("tiny", (
    WorkloadRecord(Call("sdpa", 1, 16, 16, 4, 2, 16, 16, "fp32", "causal", is_causal=True, enable_gqa=True), 2, 0,
                   ("model.layers.0.self_attn", "model.layers.1.self_attn")),
    WorkloadRecord(Call("sdpa", 1, 1, 17, 4, 2, 16, 16, "fp32", enable_gqa=True), 2, 1, ("model.layers.0.self_attn",)),
    WorkloadRecord(Call("sdpa", 1, 8, 8, 4, 4, 16, 16, "fp32", unsupported="dropout_p=0.5: no dropout"), 1, 2,
                   ("drop",)),
))


def test_a_workload_is_replayed_and_summed_per_step(pytester):
    pytester.makepyfile(test_suite=attention_suite("all"))
    (pytester.path / "tiny.workload.json").write_text(dumps(TINY))
    result = pytester.runpytest_inprocess(*FAST, "--attn-workload=tiny.workload.json")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "workload tiny (tiny.workload.json): 3 distinct call(s), 5 per step",
        "  every total below leaves out 1 record(s) (1 call(s)) that cannot be replayed: r2 (sdpa at drop, x1):"
        " dropout_p=0.5: no dropout",
        "  sdpa-math: * of attention per step, MFU n/a; by call site: model.layers.*.self_attn 100.0%",
        "  MFU n/a: *",
        "  fastest back end per record: * per step (records won: sdpa-math 2)",
    ])
    assert {"wl-tiny-r0-fp32-causal-fwd:", "wl-tiny-r1-fp32-full-fwd:"} <= {
        line.split()[0] for line in result.stdout.lines if line.startswith("wl-")}


@pytest.mark.parametrize(("write", "message"), [
    (None, "*--attn-workload*no workload file 'w.json' (looked from *)*python -m pytest_attn.capture*"),
    ("{", "*--attn-workload*w.json is not JSON*"),
    (json.dumps({**json.loads(dumps(TINY)), "version": VERSION + 1}),
     f"*w.json is a workload of format version {VERSION + 1}; this pytest-attn reads version {VERSION} and older*"),
])
def test_a_bad_workload_stops_the_run_at_start_up(pytester, write, message):
    pytester.makepyfile(test_suite=attention_suite("all"))
    if write is not None:
        (pytester.path / "w.json").write_text(write)
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--attn-workload=w.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_a_record_too_long_for_this_cpu_says_to_replay_on_a_gpu_not_to_shrink_an_attn_case():
    big = dense("mine", sq=2048, sk=2048, hq=32, hkv=8, d=128, batch=4)
    exc = TooLongHere("one call is 68.8 GFLOP: ...; skipped before starting.", 68.8, 0.62)
    said = skip_reason(exc, big, adhoc=True, profile="cpu", given="--attn-workload")
    assert said.endswith("This record of --attn-workload is too large for a CPU run: replay the workload on a GPU,"
                         " or capture a smaller step (fewer or shorter prompts) for a CPU")
    assert "--attn-case" not in said


def test_two_workloads_of_one_name_are_refused_by_that_name(pytester):
    pytester.makepyfile(test_suite=attention_suite("all"))
    (pytester.path / "w.json").write_text(dumps(TINY))
    result = pytester.runpytest_inprocess("-p", "no:cacheprovider", "--attn-workload=w.json", "--attn-workload=w.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--attn-workload: two workloads are named tiny: give each once*"])
