"""What the plugin says, as a new user meets it on a CPU -- in a folder of their own holding the README's recipe
files, or with a back end of their own that is broken: each message says what happened, why, and what to do, in
words valid where the user stands (issue 51). In-process sessions on the CPU profile; the texts checked are the
lines a user reads."""

from __future__ import annotations

import json
import types
from fnmatch import fnmatch

import pytest
from factories import CPU, attention_suite, dense, record
from readme_blocks import commands

from pytest_attn.engine.settings import CaseSkipped, TooLongHere
from pytest_attn.plugin.hints import in_this_run, rerecord_command, skip_reason
from pytest_attn.plugin.nothing_selected import keyword_matches
from pytest_attn.verdicts.baseline import RERECORD, lock_path, save_baseline
from pytest_attn.verdicts.fingerprint import fingerprint_of
from pytest_attn.verdicts.table import TimeCaps, render

FAST = ["-p", "no:cacheprovider", "--attn-max-time=0.05", "--attn-min-samples=5"]
#: The README's own --attn-case example (its Options table).
README_CASE = "batch=4,seqlen=2048,heads=16,head_dim=128,causal"
NOT_USED = "Benchmark fixture was not used at all"


def recipe_folder(pytester: pytest.Pytester) -> None:
    """The README's recipe files (my_attention.py, conftest.py, test_my_attention.py, ...), as a user's folder."""
    files = {name: text for c in commands() if c.kind == "cpu" for name, text in c.files}
    for name, text in files.items():
        (pytester.path / name).write_text(text)


BROKEN = '''
import torch
import torch.nn.functional as F


def attention(q, k, v):
    return F.scaled_dot_product_attention(q, k, v, enable_gqa=True)


class _RaisesInBackward(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v):
        return attention(q, k, v)

    @staticmethod
    def backward(ctx, grad):
        raise RuntimeError("my backward kernel: invalid argument")


class Broken:
    description = "a planted fault"
    layout = "bhsd"
    needs_cuda = False
    has_backward = True
    default_enabled = False

    def __init__(self, name, call):
        self.name, self._call = name, call

    def available(self):
        return None

    def supports(self, case, device):
        return None if case.mask.kind == "none" and not case.ragged else "dense, no mask"

    def workspace_bytes(self, case):
        return 0

    def prepare(self, case, inputs):
        return lambda: self._call(inputs.q, inputs.k, inputs.v)


def fails_forward(q, k, v):
    raise RuntimeError("my forward kernel: invalid argument")


def pytest_attn_register_backends(registry, config):
    registry.register(Broken("bwd-raises", _RaisesInBackward.apply))
    registry.register(Broken("no-graph", lambda q, k, v: attention(q, k, v).detach()))
    registry.register(Broken("fwd-raises", fails_forward))
    registry.register(Broken("wrong", lambda q, k, v: attention(q, k, v) + 1))
'''
ONE_SHAPE = ["--attn-profile=cpu", "--attn-dtypes=fp32", "-k", "tiny-mha"]


def failure_block(result: pytest.RunResult, test_id: str) -> list[str]:
    """The lines pytest prints for one failed test, between its header and the next."""
    lines = result.stdout.lines
    start = next(i for i, line in enumerate(lines) if line.startswith("_") and test_id in line)
    end = next(i for i, line in enumerate(lines) if i > start and line.startswith(("_", "=")))
    return [line for line in lines[start + 1:end] if line.strip()]


# ---- 1. a broken backward reads as a broken forward ----------------------------------------------------------
def test_a_broken_backward_fails_in_three_lines_as_a_broken_forward_does(pytester):
    pytester.makeconftest(BROKEN)
    pytester.makepyfile(test_suite=attention_suite("prefill"))
    result = pytester.runpytest(*FAST, *ONE_SHAPE, "--attn-backends=bwd-raises,no-graph,fwd-raises")
    result.assert_outcomes(failed=4, passed=2)  # the fwd cases of bwd-raises and no-graph are right
    backward = failure_block(result, "bwd-raises-tiny-mha-fp32-full-fwdbwd")
    assert backward[0] == ("bwd-raises-tiny-mha-fp32-full-fwdbwd: its backward raised RuntimeError: my backward"
                           " kernel: invalid argument")
    assert fnmatch(backward[1], "  raised at conftest.py:* in backward") and len(backward) == 3
    assert backward[2] == ("  the forward ran; nothing was timed (a fwd+bwd case times the forward and"
                           " torch.autograd.grad of its output for dq, dk and dv). Fix the back end's backward, or"
                           " declare has_backward = False to measure its forward only")
    no_graph = failure_block(result, "no-graph-tiny-mha-fp32-full-fwdbwd")
    assert no_graph[0] == ("no-graph-tiny-mha-fp32-full-fwdbwd: its backward cannot run: the output has no autograd"
                           " graph back to q, k and v (computed without them, or detached)")
    assert len(no_graph) == 3 and "has_backward = False" in no_graph[2]
    forward = failure_block(result, "fwd-raises-tiny-mha-fp32-full-fwd]")  # the form the backward now has
    assert forward[0] == "fwd-raises-tiny-mha-fp32-full-fwd: its forward raised RuntimeError: my forward kernel:" \
                         " invalid argument"
    assert fnmatch(forward[1], "  raised at conftest.py:* in fails_forward (called from conftest.py:* in <lambda>)")
    assert len(forward) == 3 and forward[2].startswith("  nothing was timed. Fix the call prepare() returns")
    out = result.stdout.str()
    assert "Traceback" not in out and "autograd/graph.py" not in out and "_engine_run_backward" not in out


# ---- 4. a back end that failed is not said to be explained by -rs -------------------------------------------
def test_a_back_end_that_failed_is_pointed_to_its_failures_not_to_the_skip_reasons(pytester):
    pytester.makeconftest(BROKEN)
    pytester.makepyfile(test_suite=attention_suite("prefill"))
    result = pytester.runpytest(*FAST, *ONE_SHAPE, "--attn-directions=fwd",
                                "--attn-backends=sdpa-math,wrong,flash-attn")
    result.assert_outcomes(passed=1, failed=1, skipped=1)
    result.stdout.fnmatch_lines(["profile: cpu; back ends that ran: sdpa-math (1 more selected did not run here: pytest"
                                 " -rs says why; wrong measured nothing and failed: the failures above say why, and"
                                 " pytest -rf lists them); torch CPU threads: *"])


# ---- 6. no "Benchmark fixture was not used at all" for a case the plugin refused -----------------------------
def test_a_refused_or_skipped_case_carries_no_benchmark_fixture_warning(pytester):
    pytester.makeconftest(BROKEN)
    pytester.makepyfile(test_suite=attention_suite("prefill"))
    result = pytester.runpytest(*FAST, *ONE_SHAPE, "--attn-backends=wrong,fwd-raises,flash-attn", "-rs")
    result.assert_outcomes(failed=4, skipped=2)  # wrong's fwd+bwd fails on its output too
    result.stdout.fnmatch_lines(["*wrong-tiny-mha-fp32-full-fwd gives a wrong output before timing*",
                                 "*SKIPPED*no CUDA device*"])
    assert NOT_USED not in result.stdout.str()


def test_a_refused_case_under_benchmark_disable_carries_no_warning_either(pytester):
    pytester.makeconftest(BROKEN)
    pytester.makepyfile(test_suite=attention_suite("prefill"))
    result = pytester.runpytest(*FAST, *ONE_SHAPE, "--attn-directions=fwd", "--attn-backends=fwd-raises",
                                "--benchmark-disable")
    result.assert_outcomes(failed=1)
    assert NOT_USED not in result.stdout.str()


# ---- 2. -k that matches no case of the profile says which profile holds them ---------------------------------
def test_a_keyword_no_cpu_case_matches_names_the_profile_that_holds_them(pytester):
    recipe_folder(pytester)
    result = pytester.runpytest("-p", "no:cacheprovider", "test_my_attention.py", "--attn-backends=mine",
                                "--attn-profile=cpu", "-k", "llama")
    result.stdout.fnmatch_lines([
        "measured nothing: no attention case was selected: -k 'llama' matched none of these tests' 12 case(s) in the"
        " cpu profile: tiny-cross-causal, tiny-gqa-causal, tiny-mha; cases it matches are in the smoke, default, full"
        " and sustained profiles: --attn-profile=default*"])


def test_keyword_expressions_are_read_as_pytest_reads_them():
    names = ["test_my_attention.py", "test_prefill[mine-llama3-8b-prefill-bf16-causal-fwd]"]
    assert keyword_matches("llama", names) and keyword_matches("LLAMA and fwd", names)
    assert keyword_matches("llama and not fwd", names) is False
    assert keyword_matches("(gpt2 or llama) and test_prefill", names)
    assert keyword_matches("not (llama)", names) is False
    assert keyword_matches("llama and", names) is None and keyword_matches("(llama", names) is None


# ---- 3. the README's --attn-case example on a CPU -------------------------------------------------------------
def test_the_readmes_attn_case_on_a_cpu_says_the_shape_is_too_large_and_how_to_make_a_small_one(pytester,
                                                                                                 monkeypatch):
    monkeypatch.setattr("pytest_attn.plugin.session.cpu_gflops", lambda: {"bf16": 100.0, "fp32": 100.0})
    recipe_folder(pytester)
    result = pytester.runpytest("-p", "no:cacheprovider", "test_my_attention.py", "--attn-backends=mine",
                                f"--attn-case={README_CASE}", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines([
        # 64 heads x 2048 x 2049 / 2 visible pairs x 512 FLOP = 68.8 GFLOP, at 12.5 GFLOP/s 5.5 s; 0.5 s of it is
        # 6.3 GFLOP: seqlen 1024 is 17.2 GFLOP, 512 is 4.3
        "SKIPPED * one call is 68.8 GFLOP: about 5.5 s on this CPU (a bf16 matmul runs at 100 GFLOP/s here,"
        " attention at about 12% of that), over the 0.5 s a call may take here; skipped before starting. The shape"
        " given with --attn-case is too large for a CPU run: give a smaller one (a call of about 6.3 GFLOP fits"
        " here: e.g. seqlen=512 instead of 2048), or run it on a GPU"])
    assert "--attn-profile=cpu" not in result.stdout.str()


def test_an_attn_case_the_dtype_filter_removed_is_said_so_not_blamed_on_a_suite(pytester):
    recipe_folder(pytester)
    result = pytester.runpytest("-p", "no:cacheprovider", "test_my_attention.py", "--attn-backends=mine",
                                f"--attn-case={README_CASE}", "--attn-dtypes=fp32")
    result.stdout.fnmatch_lines([
        f"measured nothing: no attention case was selected: --attn-dtypes=fp32 removed the one problem of these"
        f" tests: --attn-case '{README_CASE}' is bf16 (an --attn-case is bf16 unless it says dtype=: add dtype=fp32"
        f" to it)"])
    assert "suites/" not in result.stdout.str()


def test_a_case_too_long_for_this_cpu_gets_the_advice_of_where_it_came_from():
    big = dense("mine", sq=2048, sk=2048, hq=16, hkv=16, d=128, batch=4)
    exc = TooLongHere("one call is 68.8 GFLOP: ...; skipped before starting.", 68.8, 0.62)
    assert skip_reason(exc, big, adhoc=True, profile="cpu").endswith(
        "(a call of about 0.62 GFLOP fits here: e.g. seqlen=128 instead of 2048), or run it on a GPU")
    assert skip_reason(exc, big, adhoc=False, profile="cpu").endswith(
        "The cpu profile's shapes are its smallest, and this CPU runs them slower than a call may take (is it"
        " busy?): rerun when it is idle, or on a GPU")
    assert skip_reason(exc, big, adhoc=False, profile="default").endswith(
        "On a CPU, use --attn-profile=cpu (tiny shapes); --attn-profile=default is for a GPU")
    assert skip_reason(CaseSkipped("no CUDA device"), big, adhoc=True, profile="cpu") == "no CUDA device"


# ---- 5. an option the engine cannot honour stops the run at start-up ----------------------------------------
def test_min_samples_above_the_samplers_limit_is_refused_at_start_up(pytester):
    pytester.makepyfile(test_suite=attention_suite("prefill"))
    result = pytester.runpytest(*FAST[:2], *ONE_SHAPE, "--attn-backends=sdpa-math", "--attn-min-samples=200000")
    assert result.ret == pytest.ExitCode.USAGE_ERROR and "passed" not in result.stdout.str()
    result.stderr.fnmatch_lines(["*--attn-min-samples=200000 is more than 100,000, the most samples a case takes;"
                                 " give 5 to 100,000"])


# ---- 7. time-cap notes: one line on a CPU, a few per case on a GPU -------------------------------------------
def test_a_cpu_run_says_its_time_capped_cases_in_one_line(pytester):
    pytester.makepyfile(test_suite=attention_suite("prefill"))
    result = pytester.runpytest(*FAST, "--attn-profile=cpu", "--attn-backends=sdpa-math", "--attn-precision=0.0001%",
                                "--attn-dtypes=fp32", "--attn-directions=fwd", "-k", "tiny-mha or tiny-cross")
    result.assert_outcomes(passed=2)
    result.stdout.fnmatch_lines([
        "note: 2 case(s) stopped at their time cap before the 0.0001 % precision target: on a CPU that is expected;"
        " their medians are still compared with their own noise (-v lists them)"])
    assert "stopped at the time-cap" not in result.stdout.str()


def test_time_cap_notes_on_a_gpu_are_per_case_and_capped_and_every_one_with_verbose():
    capped = [record("flash-attn", 1e-3, shape=f"s{i}", stop="time-cap", test=f"t{i}") for i in range(8)]
    def notes(records, caps):
        return [n for n in render(records, None, time_caps=caps) if n.startswith("note:") and "time" in n]

    assert notes(capped, TimeCaps(cpu=False, target=0.01)) == [
        f"note: flash-attn-s{i}-bf16-causal-fwd: stopped at the time-cap at ±0.4%" for i in range(5)] + [
        "note: and 3 more case(s) stopped at their time cap before the 1 % precision target (-v lists them)"]
    assert len(notes(capped, TimeCaps(cpu=True, target=0.01, every=True))) == 8
    cpu = notes([record("mine", 1e-3, stop="time-cap", device=CPU)], TimeCaps(cpu=True, target=0.01))
    assert cpu == ["note: 1 case(s) stopped at their time cap before the 1 % precision target: on a CPU that is"
                   " expected; their medians are still compared with their own noise (-v lists them)"]


# ---- 8. hints valid from the user's own folder --------------------------------------------------------------
def test_the_rerecord_hint_names_the_users_own_command():
    config = types.SimpleNamespace(invocation_params=types.SimpleNamespace(args=(
        "test_my_attention.py", "--attn-backends=mine", "--attn-add-to-baseline", "--attn-baseline", "b.json",
        "-k", "tiny mha")))
    assert rerecord_command(config) == ("pytest test_my_attention.py --attn-backends=mine -k 'tiny mha'"
                                        " --attn-save-baseline --attn-force")
    said = in_this_run(f"baselines/cpu-x/baseline.json holds no benchmarks; {RERECORD}", config)
    assert said.endswith("; re-record it: pytest test_my_attention.py --attn-backends=mine -k 'tiny mha'"
                         " --attn-save-baseline --attn-force")
    assert "suites/" not in RERECORD


def test_an_unusable_baseline_in_a_users_folder_says_how_to_rerecord_it_from_there(pytester, monkeypatch):
    from pytest_attn.engine.probe import probe_device

    recipe_folder(pytester)
    folder = pytester.path / "baselines" / fingerprint_of(probe_device()[0]).key
    folder.mkdir(parents=True)
    (folder / "baseline.json").write_text(json.dumps({"benchmarks": []}))
    result = pytester.runpytest(*FAST, "test_my_attention.py", "--attn-backends=mine", "--attn-dtypes=fp32",
                                "--attn-directions=fwd", "-k", "tiny-mha")
    result.stderr.fnmatch_lines([  # refused at start-up: the stored baseline is read before any case
        "ERROR: the stored baseline for *: baseline * holds no benchmarks; re-record it: pytest -p no:cacheprovider"
        " --attn-max-time=0.05 --attn-min-samples=5 test_my_attention.py --attn-backends=mine --attn-dtypes=fp32"
        " --attn-directions=fwd -k tiny-mha * --attn-save-baseline --attn-force*"])  # (pytester adds --basetemp)


def test_saving_a_baseline_leaves_no_lock_file_beside_it(tmp_path):
    path = tmp_path / "baselines" / "cpu-x" / "baseline.json"
    run = {"benchmarks": [{"name": "t", "stats": {"median": 1e-3}}], "machine_info": {}}
    save_baseline(path, run, fingerprint_of(CPU))
    assert sorted(p.name for p in path.parent.iterdir()) == ["baseline.json"]  # git add baselines/ adds this alone
    assert not lock_path(path).is_relative_to(tmp_path)


def test_the_gpu_opt_in_of_fuzzing_names_the_users_own_file(pytester, monkeypatch):
    """(Named without test_fuzz: a path holding it opts in.)"""
    from pytest_attn.plugin.session import AttnSession

    monkeypatch.setattr(AttnSession, "has_gpu", property(lambda self: True))  # a pretend GPU, for this session only
    pytester.makepyfile(test_mine=FUZZ_SUITE)
    result = pytester.runpytest("-p", "no:cacheprovider", "--attn-backends=sdpa-math", "--attn-directions=fwd", "-rs")
    result.assert_outcomes(skipped=1)
    result.stdout.fnmatch_lines(["SKIPPED * fuzzing is opt-in on a GPU (it compiles kernels for many shapes): add"
                                 " --attn-fuzz (pytest test_mine.py --attn-fuzz)"])


FUZZ_SUITE = '''
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


def test_no_message_of_the_package_names_a_path_or_an_install_of_this_checkout():
    """A user's folder has no suites/, scripts/ or docs/, and pytest-attn is installed there, not from a checkout
    (``pip install -e``): no string the package prints may assume either. Docstrings and comments may."""
    import ast
    from pathlib import Path

    import pytest_attn

    found = []
    for path in Path(pytest_attn.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text())
        docstrings = {id(node.body[0].value) for node in ast.walk(tree)
                      if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                      and node.body and isinstance(node.body[0], ast.Expr)
                      and isinstance(node.body[0].value, ast.Constant)}
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and id(node) not in docstrings \
                    and any(bad in node.value for bad in ("pip install -e", "suites/", "scripts/", "docs/")):
                found.append(f"{path.name}:{node.lineno}: {node.value[:80]}")
    assert not found, "\n".join(found)
