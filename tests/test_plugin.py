"""End-to-end: the plugin inside a real pytest session (pytester), on the CPU profile."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from factories import attention_suite
from fake_clock_runs import STEADY_CONFTEST, on_the_fake_clock

from pytest_attn.core.record import Record
from pytest_attn.plugin.session import not_loaded

torch = pytest.importorskip("torch")

SUITE = attention_suite()

FAST = ["-p", "no:cacheprovider", "--attn-profile=cpu", "--attn-max-time=0.05", "--attn-min-samples=5"]


def test_cpu_profile_end_to_end(pytester, monkeypatch):
    # as where Python keeps no bytecode for torch (engine.probe.uncompiled_bytecode; tests/test_progress.py)
    monkeypatch.setattr("pytest_attn.plugin.summary.uncompiled_bytecode", lambda: "start-up: no bytecode (planted)")
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(*FAST, "--attn-backends=sdpa-math,sdpa-efficient", "--attn-dtypes=fp32",
                                "--benchmark-json=out.json", "-rs")
    outcomes = result.parseoutcomes()
    assert outcomes["passed"] >= 6 and outcomes["skipped"] >= 6
    result.stdout.fnmatch_lines([
        "*pytest-attn summary*",
        "profile: cpu; back ends that ran: sdpa-math (1 more selected did not run here: pytest -rs says why); torch"
        " CPU threads: *",
        "wall time * s: start-up * s (Python, imports, collection, any compile phase);*",
        "start-up: no bytecode (planted)",
        "device: CPU*",
        "tiny-gqa-causal-fp32-causal-fwd: 2 x sq=96 sk=96, 8q/2kv heads*",
        "*sdpa-math*cpu",
        "*x no CUDA device",
    ])
    data = json.loads((pytester.path / "out.json").read_text())
    assert data["machine_info"]["attn_device"]["kind"] == "cpu"
    bench = next(b for b in data["benchmarks"] if b["name"].endswith("[sdpa-math-tiny-gqa-causal-fp32-causal-fwd]"))
    assert bench["group"] == "tiny-gqa-causal-fp32-causal-fwd"
    r = Record.from_json(bench["extra_info"])  # the record of every case, in the benchmark JSON
    assert r.test == bench["fullname"] and r.case.id == "sdpa-math-tiny-gqa-causal-fp32-causal-fwd"
    assert (r.case.direction, r.case.dtype, r.case.mask.id) == ("fwd", "fp32", "causal")
    assert r.case.seqlens_q == (96, 96) and r.case.seqlens_k == (96, 96)
    assert r.timing.timer == "cpu" and r.figures.flops_convention == "exact-mask"
    assert r.figures.tflops > 0 and r.figures.mfu_datasheet is None
    assert r.peers is not None and r.peers.results == 1 and r.peers.speedup == 1.0  # sdpa-efficient needs a GPU
    assert bench["stats"]["median"] == pytest.approx(r.median_s)  # pytest-benchmark holds our samples
    assert bench["stats"]["rounds"] == len(r.timing.samples_s)
    ragged = [Record.from_json(b["extra_info"]) for b in data["benchmarks"] if "tiny-varlen" in b["name"]]
    assert all(x.case.seqlens_q == (1, 7, 33, 64) for x in ragged)


def test_fixtures_for_user_tests(pytester):
    pytester.makepyfile(
        """
        def test_peak(attn_device, attn_peak):
            assert attn_device.kind == "cpu"
            assert attn_peak("bf16").datasheet_tflops == 123.0
        """
    )
    pytester.runpytest("-p", "no:cacheprovider", "--attn-peak-tflops=123").assert_outcomes(passed=1)


@pytest.mark.parametrize(
    ("flag", "message"),
    [
        ("--attn-backends=sdpa-math,fa9", "*unknown back end 'fa9'; valid: sdpa-flash, sdpa-efficient*"),
        ("--attn-dtypes=fp64", "*unknown dtype 'fp64'; valid: fp16, bf16, fp32, fp8*"),
        ("--attn-profile=huge", "*unknown profile 'huge'; valid: auto, smoke, default, full, cpu*"),
        ("--attn-precision=2", "*--attn-precision '2' reads as 200%: write it with a % sign*"),
        ("--attn-timer=wall", "*unknown timer 'wall'*"),
    ],
)
def test_bad_options_fail_at_start_up(pytester, flag, message):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", flag)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])


def test_benchmark_disable_checks_without_timing(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(*FAST, "--attn-backends=sdpa-math", "--attn-dtypes=fp32", "--benchmark-disable")
    assert result.parseoutcomes()["passed"] >= 6
    assert "TFLOP/s" not in result.stdout.str()  # nothing timed, so no results table


def test_collection_never_initialises_cuda(pytester):
    pytester.makeconftest(
        """
        import torch.cuda

        def _refuse(*args, **kwargs):
            raise RuntimeError("CUDA was initialised during collection")

        torch.cuda._lazy_init = _refuse
        torch.cuda.init = _refuse
        """
    )
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--collect-only", "-q", "--attn-backends=all")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*test_attn[[]sdpa-cudnn-tiny-mha-fp32-full-fwd[]]*"])


KIND_SUITE = '''
import pytest
from pytest_attn.plugin import attn_cases


def pytest_generate_tests(metafunc):
    kind = metafunc.module.__name__.split("_")[-1]
    if "case" in metafunc.fixturenames:
        cases = attn_cases(metafunc.config, kind)
        metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_attn(attn_bench, case):
    attn_bench(case)
'''


def test_each_suite_gets_its_back_ends(pytester):
    for kind in ("prefill", "decode", "varlen", "masks"):
        pytester.makepyfile(**{f"test_kind_{kind}": KIND_SUITE})
    result = pytester.runpytest("-p", "no:cacheprovider", "--attn-profile=cpu", "--collect-only", "-q",
                                "--attn-backends=all")
    ids = result.stdout.str()
    # mask expressions only in the mask suite; KV-cache calls only in decode; the SDPA loop only in varlen
    assert "test_kind_masks.py::test_attn[flashinfer-custom-tiny-masks-fp32-all-true-fwd]" in ids
    assert "test_kind_prefill.py::test_attn[flashinfer-custom" not in ids
    assert "test_kind_decode.py::test_attn[flash-attn-kvcache-tiny-decode-fp32-causal-fwd]" in ids
    assert "test_kind_prefill.py::test_attn[flash-attn-kvcache" not in ids
    assert "test_kind_varlen.py::test_attn[sdpa-loop-tiny-varlen-fp32-causal-fwd]" in ids
    assert "test_kind_prefill.py::test_attn[sdpa-loop" not in ids
    assert "test_kind_prefill.py::test_attn[flash-attn-tiny-mha-fp32-full-fwd]" in ids


def test_relative_figures_reach_the_saved_json(pytester):
    pytester.makepyfile(test_kind_varlen=KIND_SUITE)
    result = pytester.runpytest(*FAST, "--attn-backends=sdpa-loop,reference", "--attn-dtypes=fp32",
                                "--attn-directions=fwd", "--benchmark-json=out.json")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    benches = json.loads((pytester.path / "out.json").read_text())["benchmarks"]
    peers = [Record.from_json(b["extra_info"]).peers for b in benches]
    slowdowns = sorted(p.slowdown for p in peers)
    assert len(slowdowns) == 2 and slowdowns[0] == 1.0 and slowdowns[1] > 1.0
    assert {p.fastest for p in peers} <= {"sdpa-loop", "reference"}


def test_kernel_marker_is_checked_only_where_kernels_are_seen(pytester):
    pytester.makepyfile(test_marked='''
import pytest
from pytest_attn.core.case import AttnCase


@pytest.mark.attn_kernels(must=["flash_fwd_kernel"])
def test_marked(attn_bench):
    attn_bench(AttnCase.dense(backend="sdpa-math", shape="t", batch=1, seqlen_q=8, heads_q=2, head_dim=8,
                              dtype="fp32"))
''')
    result = pytester.runpytest(*FAST, "--attn-backends=sdpa-math", "--strict-markers")
    result.assert_outcomes(passed=1)  # on CPU the profiler sees no kernels: nothing to assert


FUZZ_SUITE = '''
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pytest_attn.plugin import fuzz_targets


def pytest_generate_tests(metafunc):
    if "fuzz_target" in metafunc.fixturenames:
        targets = fuzz_targets(metafunc.config)
        metafunc.parametrize("fuzz_target", targets, ids=[f"{b}-{d}" for b, d in targets])


@given(data=st.data())
def test_fuzz(attn_fuzzer, fuzz_target, data):
    attn_fuzzer.check(*fuzz_target, data)
'''


def test_fuzzing_runs_on_cpu_and_is_opt_in_on_a_gpu(pytester, monkeypatch):
    pytester.makepyfile(suite_fuzz=FUZZ_SUITE)  # not named test_fuzz*: opting in by path does not apply
    args = ["-p", "no:cacheprovider", "--attn-backends=sdpa-math", "--attn-directions=fwd", "suite_fuzz.py", "-rs"]
    result = pytester.runpytest(*args)
    result.assert_outcomes(passed=1)  # the ci profile on CPU
    result.stdout.fnmatch_lines(["*pytest-attn fuzz*", "*hypothesis profile: ci*", "*sdpa-math fwd: 50*"])
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)  # a pretend GPU, for this test only
    result = pytester.runpytest(*args)
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["*fuzzing is opt-in on a GPU*--attn-fuzz*"])


def test_fuzz_examples_override_the_profiles_count(pytester):
    pytester.makepyfile(suite_fuzz=FUZZ_SUITE)
    base = ["-p", "no:cacheprovider", "--attn-backends=sdpa-math", "--attn-directions=fwd", "suite_fuzz.py"]
    result = pytester.runpytest(*base, "--attn-fuzz-examples=7")
    result.assert_outcomes(passed=1)
    result.stdout.fnmatch_lines(["*hypothesis profile: ci-x7*", "*sdpa-math fwd: 7 ran: self *"])
    result = pytester.runpytest(*base, "--hypothesis-profile=thorough", "--attn-fuzz-examples=4")
    result.stdout.fnmatch_lines(["*hypothesis profile: thorough-x4*", "*sdpa-math fwd: 4 ran: *"])
    result = pytester.runpytest(*base, "--attn-fuzz-examples=0")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--attn-fuzz-examples must be positive, got '0'*"])


SHY_CONFTEST = '''
import torch.nn.functional as F


class Shy:
    """Takes the fuzzer's small decode probe, refuses every decode case drawn afterwards."""

    name = "shy"
    description = "SDPA math that refuses decode shapes past the probe"
    layout = "bhsd"
    needs_cuda = False
    has_backward = True
    default_enabled = False
    empty_rows = "any"

    def available(self):
        return None

    def supports(self, case, device):
        decode = max(case.seqlens_q) <= 4 and case.seqlens_q != case.seqlens_k
        if case.ragged or case.mask.kind != "none" or (decode and case.shape != "probe"):
            return "refused"
        return None

    def workspace_bytes(self, case):
        return 0

    def prepare(self, case, inputs):
        q, k, v = inputs.q, inputs.k, inputs.v
        gqa = case.heads_q != case.heads_kv
        return lambda: F.scaled_dot_product_attention(q, k, v, scale=case.scale, enable_gqa=gqa)


def pytest_attn_register_backends(registry, config):
    registry.register(Shy())
'''


def test_a_relation_no_example_reached_fails_the_run_by_name(pytester):
    pytester.makeconftest(SHY_CONFTEST)
    pytester.makepyfile(suite_fuzz=FUZZ_SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--attn-backends=shy", "--attn-directions=fwd",
                                "suite_fuzz.py")
    result.assert_outcomes(passed=1)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(["*shy fwd: * ran: self *, decode 0 (* refused)*",
                                 "FAILED reach: shy fwd: no decode example ran, though the back end takes it*"])


@pytest.mark.e2e  # pytest-xdist: a controller and two workers
def test_under_xdist_the_fuzz_summary_and_reach_check_come_from_the_workers(pytester):
    pytester.makeconftest(SHY_CONFTEST)
    pytester.makepyfile(suite_fuzz=FUZZ_SUITE)
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--attn-backends=shy", "-n", "2",
                                           "suite_fuzz.py")
    result.assert_outcomes(passed=2)  # fwd and fwd+bwd, one in each worker
    assert result.ret == pytest.ExitCode.TESTS_FAILED, result.stdout.str()
    result.stdout.fnmatch_lines(["*pytest-attn fuzz*", "*hypothesis profile: ci*",
                                 "*shy fwd: * ran: self *, decode 0 (* refused)*",
                                 "*shy fwd+bwd: * ran: self *, decode 0 (* refused)*",
                                 "FAILED reach: shy fwd: no decode example ran, though the back end takes it*",
                                 "FAILED reach: shy fwd+bwd: no decode example ran*"])


WRONG_CONFTEST = SHY_CONFTEST.replace('name = "shy"', 'name = "wrong"').replace("scale=case.scale,",
                                                                                   "scale=1.5 * case.scale,")


NOT_SHRUNK = """

from hypothesis import Phase, settings

import pytest_attn.fuzz.profiles  # registers ci

settings.register_profile("ci-not-shrunk", parent=settings.get_profile("ci"),
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
"""


def _a_fuzz_failure_in_the_suite(pytester) -> str:
    """The varlen fuzz suite on a back end with a wrong scale: its failure block read, its replay command returned.
    (The ci profile without shrinking: the block and the replay read the same for the first failing example, and
    shrinking and explaining it was most of this run.)"""
    pytester.makeconftest(WRONG_CONFTEST + NOT_SHRUNK)
    pytester.makepyfile(test_fuzz_varlen=(Path(__file__).parents[1] / "suites" / "test_fuzz_varlen.py").read_text())
    result = pytester.runpytest("-p", "no:cacheprovider", "--attn-backends=wrong", "--attn-directions=fwd",
                                "--hypothesis-profile=ci-not-shrunk")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "test_fuzz_varlen[wrong-fwd]" in line and line.startswith("_"))
    block = lines[start : start + 15]
    assert any(line.startswith("wrong gives a wrong result on ") for line in block), "\n".join(block)
    assert any(line.startswith("  out: max |got - fp64| = ") and " at sequence " in line for line in block)
    replay = next(line for line in block if line.startswith("  replay: "))
    assert "FAILED reach" not in result.stdout.str() and "ratio inf" not in result.stdout.str()
    command = replay.removeprefix("  replay: ")
    assert " --backends-from conftest.py '" in command
    return command


def test_a_fuzz_failure_reads_at_the_top_of_its_block_and_its_replay_loads_the_conftest(pytester, monkeypatch,
                                                                                         capsys):
    """The replay, in this process: the command's arguments given to ``python -m pytest_attn.fuzz``'s main (the
    same command in a shell: the end-to-end test below)."""
    import shlex

    from pytest_attn.fuzz.__main__ import main

    words = shlex.split(_a_fuzz_failure_in_the_suite(pytester))
    assert words[:4] == ["PYTHONPATH=.", "python", "-m", "pytest_attn.fuzz"]
    monkeypatch.chdir(pytester.path)
    capsys.readouterr()
    assert main(words[4:]) == 1  # the same wrong result, on this machine
    assert capsys.readouterr().out.startswith("wrong gives a wrong result on ")


@pytest.mark.e2e  # the replay in a shell: a Python that imports torch
def test_a_fuzz_failures_replay_runs_in_a_shell(pytester):
    import subprocess
    import sys

    command = _a_fuzz_failure_in_the_suite(pytester)
    # the replay says "python", as a user's shell has it: here, this interpreter (its bin need not be on PATH)
    path = os.pathsep.join([os.path.dirname(sys.executable), os.environ.get("PATH", "")])
    done = subprocess.run(command, shell=True, cwd=pytester.path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path), "PATH": path})
    assert done.returncode == 1, done.stderr  # the same wrong result, on this machine
    assert done.stdout.startswith("wrong gives a wrong result on "), done.stdout + done.stderr


OWN_FUZZ_TEST = """
from hypothesis import Phase, given, settings
from hypothesis import strategies as st


@settings(max_examples=20, database=None, phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.shrink])
@given(data=st.data())
def test_my_kernel(attn_fuzzer, data):
    attn_fuzzer.check("wrong", "fwd", data)
"""


def test_a_fuzz_failure_in_a_test_of_ones_own_reads_as_the_suites_do(pytester):
    """A ``@given`` test of one's own around ``attn_fuzzer.check`` printed ~100 lines (the fuzzer's source, its
    traceback, Hypothesis' dump of the draws); now the verdict, the worst element and the replay. (Shrunk, not
    explained: Hypothesis' explain phase re-runs the shrunk example under a tracer, 70 % of this test's time, for
    comments in the dump that is left out either way.)"""
    pytester.makeconftest(WRONG_CONFTEST)
    pytester.makepyfile(test_mine=OWN_FUZZ_TEST)
    result = pytester.runpytest("-p", "no:cacheprovider")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if "test_my_kernel" in line and line.startswith("_"))
    end = next(i for i, line in enumerate(lines) if i > start and line.startswith("="))
    block = [line for line in lines[start + 1 : end] if line.strip()]
    assert block[0].startswith("wrong gives a wrong result on "), "\n".join(block)
    assert block[1].startswith("  out: max |got - fp64| = ") and block[2].startswith("  replay: ")
    assert len(block) == 3 and "Traceback" not in result.stdout.str(), "\n".join(block)


def test_bad_thresholds_stop_at_start_up(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest("--attn-threshold=fast")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*threshold 'fast' is not a number or a percentage (e.g. 5% or 0.05)*"])


def test_local_history_is_kept_per_gpu(pytester, monkeypatch):
    from pytest_attn.engine.nvml import VisibleGpu
    from pytest_attn.plugin import session

    h200 = VisibleGpu(0, "GPU-0", "NVIDIA H200", None)  # type: ignore[arg-type]
    monkeypatch.setattr(session, "visible_devices", lambda: [h200])  # what NVML would say
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(*FAST, "--attn-backends=sdpa-math", "--attn-dtypes=fp32", "--attn-directions=fwd",
                                "-k", "tiny-mha", "--benchmark-autosave")
    assert result.ret == pytest.ExitCode.OK
    saved = list((pytester.path / ".benchmarks").glob("*/*/*.json"))
    assert [p.relative_to(pytester.path / ".benchmarks").parts[0] for p in saved] == ["nvidia-h200"]


def test_every_line_of_an_attention_run_fits_the_terminal(pytester, monkeypatch):
    """At 120 columns a CPU run printed a 130-column table, a 527-character first summary line, 150-260-column
    pytest-benchmark tables and progress lines past the edge; at 80 columns, nothing may pass it."""
    monkeypatch.setenv("COLUMNS", "80")
    pytester.makepyfile(test_suite=SUITE)
    flags = [*FAST, "--attn-dtypes=fp32", "--attn-max-time=0.01", "-k", "tiny-gqa"]  # every kind of line, one problem
    pytester.runpytest(*flags, "--attn-save-baseline")
    result = pytester.runpytest(*flags, "--attn-inject-slowdown=300%", "-W", "ignore::pytest.PytestWarning")
    lines = result.stdout.lines
    assert any("pytest-attn summary" in line for line in lines) and any("pytest-attn gate" in line for line in lines)
    wide = [line for line in lines if len(line) > 80 and " " in line.strip()]  # (a path alone cannot be wrapped)
    assert not wide, "\n".join(wide)


def test_benchmark_compare_shows_each_change_in_the_plugins_table_wherever_pytest_starts(pytester, monkeypatch,
                                                                                        fake_clock):
    """The comparison was only in pytest-benchmark's wide tables, and the history was kept under whatever folder
    pytest was started from. (On the fake clock: on a loaded machine 300 % injected read +145 % AMBIGUOUS.)"""
    on_the_fake_clock(monkeypatch, fake_clock)
    pytester.makeini("[pytest]\n")  # the rootdir: the history is kept here
    pytester.makeconftest(STEADY_CONFTEST)
    pytester.mkdir("sub")
    pytester.makepyfile(test_suite=SUITE)
    flags = [*FAST, "--attn-backends=steady", "--attn-dtypes=fp32", "--attn-directions=fwd", "-k",
             "tiny-mha-fp32-full", "--attn-baseline=off"]
    assert pytester.runpytest(*flags).ret == pytest.ExitCode.OK
    monkeypatch.chdir(pytester.path / "sub")
    slowed = pytester.runpytest(*flags, "../test_suite.py", "--benchmark-compare", "--attn-inject-slowdown=300%")
    assert slowed.ret == pytest.ExitCode.OK  # --benchmark-compare informs; the gate (or --benchmark-compare-fail) fails
    slowed.stdout.fnmatch_lines(["vs saved: the median's change against saved run 0001_* (--benchmark-compare):"
                                 " 1 SLOWER*", "*backend*vs saved*", "  steady *+*% SLOWER*"])
    assert not (pytester.path / "sub" / ".benchmarks").exists()
    assert len(list((pytester.path / ".benchmarks").glob("*/*.json"))) == 2


@pytest.mark.parametrize(
    ("flags", "message"),
    [
        (["--attn-case=batch=12345678901234567890,seqlen=8,heads=2,head_dim=8"],
         "*batch=12345678901234567890 is larger than 65,536, the most pytest-attn takes*"),
        (["--attn-case=batch=100000000,seqlen=8,heads=2,head_dim=8"], "*batch=100000000 is larger than 65,536*"),
        (["--attn-case=seqlen=8,heads=2,head_dim=8,heads=4"], "*heads= is given twice; give each field once*"),
        (["--attn-case=seqlen=8,heads=2,head_dim=8", "--attn-case=seqlen=8,heads=2,head_dim=8"],
         "*--attn-case: adhoc-b1-sq8-sk8-h2x2-d8 is given twice*"),
        (["--attn-max-time=inf"], "*--attn-max-time must be a finite number, got 'inf'*"),
        (["--attn-threshold-for=backend:fa9=5%"], "*--attn-threshold-for names no back end: backend:fa9; known:*"),
        (["--attn-hbm=("], "*--attn-hbm: '(' is not a regular expression*"),
        (["--attn-threshold=500"], "*--attn-threshold '500' reads as 50000%: write it with a % sign*"),
        (["--attn-trace-dir=afile/traces"], "*--attn-trace-dir=afile/traces: cannot write there*"),
        (["--attn-save-baseline", "--attn-baselines-dir=afile/baselines"],
         "*--attn-baselines-dir=*afile/baselines: cannot write there*"),
        (["--attn-report=afile/rep"], "*--attn-report=afile/rep: cannot write there*"),
        (["--attn-cpu-threads=0"], "*--attn-cpu-threads must be positive, got '0'*"),
        (["--attn-inject-slowdown=fast"], "*--attn-inject-slowdown*'fast' is not a number or a percentage*"),
        (["--attn-fail-on=worse"], "*--attn-fail-on: 'worse' is not a list of verdicts: give one or more of slower,"
                                   " timer, missing, clock, ambiguous*"),
        (["--attn-save-baseline", "--attn-add-to-baseline"],
         "*--attn-save-baseline and --attn-add-to-baseline: give one*"),
        (["--attn-cpu-threads=many"], "*--attn-cpu-threads must be a whole number, got 'many'*"),
    ],
)
def test_bad_input_stops_at_start_up_before_anything_runs(pytester, flags, message):
    pytester.makepyfile(test_suite=SUITE)
    (pytester.path / "afile").write_text("a file where a folder is wanted")
    result = pytester.runpytest("-p", "no:cacheprovider", *flags)
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([message])
    assert "passed" not in result.stdout.str()


def test_help_and_version_work_wherever_the_plugin_is_installed(pytester):
    pytester.makepyfile(test_one="def test_one():\n    assert True\n")
    helped = pytester.runpytest("--help")
    assert helped.ret == pytest.ExitCode.OK
    helped.stdout.fnmatch_lines(["*--attn-profile=NAME*", "*--attn-compile-only*"])
    assert pytester.runpytest("--version").ret == pytest.ExitCode.OK


def test_a_report_on_a_cpu_run_without_a_baseline_says_every_result_is_new(pytester):
    pytester.makepyfile(test_suite=SUITE)
    result = pytester.runpytest(*FAST, "--attn-backends=sdpa-math", "--attn-dtypes=fp32", "--attn-directions=fwd",
                                "-k", "tiny-mha", "--attn-report=rep")
    assert result.ret == pytest.ExitCode.OK
    result.stdout.fnmatch_lines(["*pytest-attn gate*", "no stored baseline for CPU * (*/baselines/cpu-*/baseline.json);"
                                 " record one with --attn-save-baseline: every result is NEW",
                                 "against none: 1 NEW*", "*wrote rep/summary.md*"])


def test_a_cpu_run_sets_torch_threads_and_says_so(pytester):
    pytester.makepyfile(test_suite=SUITE)
    args = [*FAST, "--attn-backends=sdpa-math", "--attn-dtypes=fp32", "--attn-directions=fwd"]
    try:
        result = pytester.runpytest(*args, "--attn-cpu-threads=1")
        result.stdout.fnmatch_lines(["profile: cpu; back ends that ran: sdpa-math; torch CPU threads: 1"
                                     " (--attn-cpu-threads)*"])
        assert torch.get_num_threads() == 1
        result = pytester.runpytest(*args)
        result.stdout.fnmatch_lines(["*torch CPU threads: * (auto: half of the * CPUs this process may use)*"])
    finally:
        from pytest_attn.engine.threads import auto_threads, set_torch_threads, usable_cpus

        set_torch_threads(auto_threads(usable_cpus()))


def test_auto_threads_leave_half_the_cpus():
    from pytest_attn.engine.threads import auto_threads

    assert [auto_threads(n) for n in (1, 2, 3, 16)] == [1, 1, 1, 8]


def test_a_suite_where_the_plugin_is_not_loaded_says_how_to_load_it(pytester):
    """A fresh environment ran a suite whose conftest imports pytest-attn: KeyError: <_pytest.stash.StashKey
    object at 0x...>. Now it stops at start-up with the two ways to load it; and -p pytest_attn.plugin where it
    is installed (entry point) is no longer "Plugin already registered under a different name"."""
    pytester.makeconftest("""
import pytest

from pytest_attn.plugin import prepare_attention_run


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    prepare_attention_run(config)
""")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    missing = pytester.runpytest("-p", "no:pytest_attn.plugin", "-p", "no:cacheprovider")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["ERROR: pytest-attn is not loaded as a pytest plugin in this environment*install it"
                                  " in this environment (pip install *), or load it by name: pytest -p"
                                  " pytest_attn.plugin*"])
    assert f"ERROR: {not_loaded()}" in missing.stderr.str()  # the copy imported here, by its folder
    assert "KeyError" not in missing.stdout.str() + missing.stderr.str()
    both = pytester.runpytest("-p", "pytest_attn.plugin", "-p", "no:cacheprovider")
    assert both.ret == pytest.ExitCode.OK, both.stderr.str()


def test_a_failed_case_says_its_message_once(pytester):
    """pytest.fail inside the except printed the message twice, "During handling of the above exception"."""
    pytester.makeconftest(WRONG_CONFTEST)
    pytester.makepyfile(test_suite=attention_suite("prefill"))
    result = pytester.runpytest("-p", "no:cacheprovider", "--attn-profile=cpu", "--attn-backends=wrong",
                                "-k", "tiny-mha-fp32-full-fwd and not fwdbwd")
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    out = result.stdout.str()
    assert out.count("wrong-tiny-mha-fp32-full-fwd fails its check") + out.count("gives a wrong result") <= 2, out
    assert "During handling of the above exception" not in out
