"""Every --attn-* converter (pytest_attn.plugin.options): bad values are refused at start-up with the
option's name and the valid values."""

from __future__ import annotations

import argparse
import math

import pytest

from pytest_attn.plugin import command_line
from pytest_attn.plugin import options as opt


def test_comma_lists_validate_each_item():
    assert opt.dtypes("bf16, fp16") == ("bf16", "fp16")
    with pytest.raises(argparse.ArgumentTypeError, match="unknown dtype 'fp64'; valid: fp16, bf16, fp32, fp8"):
        opt.dtypes("bf16,fp64")
    with pytest.raises(argparse.ArgumentTypeError, match="empty dtype list"):
        opt.dtypes(" , ")
    assert opt.directions("fwd+bwd") == ("fwd+bwd",)


def test_profile_timer_precision_and_numbers():
    assert opt.profile("smoke") == "smoke"
    with pytest.raises(argparse.ArgumentTypeError, match="unknown profile 'quick'; valid: auto, smoke"):
        opt.profile("quick")
    with pytest.raises(argparse.ArgumentTypeError, match="unknown timer 'wall'"):
        opt.timer("wall")
    assert opt.precision("0.005") == 0.005 and opt.precision("2%") == pytest.approx(0.02)
    for bad in ("0", "1.5", "x", "100%", "nan"):
        with pytest.raises(argparse.ArgumentTypeError, match="--attn-precision"):
            opt.precision(bad)
    assert opt.positive_float("--attn-peak-tflops")("989") == 989.0
    with pytest.raises(argparse.ArgumentTypeError, match="--attn-peak-tflops must be positive"):
        opt.positive_float("--attn-peak-tflops")("-1")
    with pytest.raises(argparse.ArgumentTypeError, match=r"--attn-min-samples must be >= 5"):
        opt.min_samples("3")


@pytest.mark.parametrize("text", ["inf", "-inf", "nan", "1e999"])
def test_numbers_must_be_finite(text):
    with pytest.raises(argparse.ArgumentTypeError, match="--attn-max-time must be a finite number"):
        opt.positive_float("--attn-max-time")(text)


def test_percentages_are_never_read_a_hundred_times_too_large():
    assert opt.threshold("5%") == opt.threshold("0.05") == 0.05
    assert opt.threshold("500%") == 5.0
    with pytest.raises(argparse.ArgumentTypeError, match="'500' reads as 50000%: write it with a % sign"):
        opt.threshold("500")
    with pytest.raises(argparse.ArgumentTypeError, match="less than 1000%"):
        opt.threshold("1000%")
    with pytest.raises(argparse.ArgumentTypeError, match="is not a number or a percentage"):
        opt.threshold("fast")
    assert opt.inject_slowdown("6%") == pytest.approx(0.06)
    assert opt.threshold_for("backend:flex=10%") == ("backend", "flex", pytest.approx(0.1))
    with pytest.raises(argparse.ArgumentTypeError, match="must look like backend:NAME=10%"):
        opt.threshold_for("flex=10%")


def test_hbm_pattern_and_head_dims_and_clock_lock():
    assert opt.hbm_pattern("hunyuan|llama").search("flash-attn-hunyuan-video")
    with pytest.raises(argparse.ArgumentTypeError, match=r"--attn-hbm: '\(' is not a regular expression"):
        opt.hbm_pattern("(")
    assert opt.fuzz_head_dims("64,128") == (64, 128)
    with pytest.raises(argparse.ArgumentTypeError, match="head dims must be positive integers"):
        opt.fuzz_head_dims("0")
    assert opt.lock_clocks("max:require").target == "max"
    with pytest.raises(argparse.ArgumentTypeError, match="--attn-lock-clocks='fast'"):
        opt.lock_clocks("fast")


def test_defaults_are_converted_values():
    # pytest --help configures without converting defaults: each must already be what its converter gives
    opt.DEFAULTS.clear()

    class Group:
        def addoption(self, *args, **kwargs):
            pass

    class Parser:
        def getgroup(self, *args, **kwargs):
            return Group()

    opt.add_options(Parser())  # type: ignore[arg-type]
    defaults = {dest: default for dest, (_, default) in opt.DEFAULTS.items()}
    assert not any(isinstance(d, str) and d != d.strip() for d in defaults.values())
    assert defaults["attn_lock_clocks"].off and defaults["attn_threshold"] == 0.05
    assert defaults["attn_precision"] == 0.01 and math.isfinite(defaults["attn_precision"])


def test_backend_names_resolve_against_the_registry():
    o = opt.AttnOptions(backends=("default", "reference"))
    assert o.resolve_backends(["a", "b", "reference"], ["a", "b"]) == ("a", "b", "reference")
    assert opt.AttnOptions(backends=("all",)).resolve_backends(["a", "b"], ["a"]) == ("a", "b")
    with pytest.raises(ValueError, match="unknown back end 'flash'; valid: a, b"):
        opt.AttnOptions(backends=("flash",)).resolve_backends(["a", "b"], ["a"])


def test_time_cap_by_profile_and_override():
    assert opt.AttnOptions().max_time_for("cpu") == 0.5
    assert opt.AttnOptions(max_time_s=7.0).max_time_for("smoke") == 7.0


def test_smaller_bad_values_are_refused_or_said(pytester):
    """--attn-cpu-threads=999 on 2 cores, an --attn-case with both directions or a slash in its name, were taken;
    --attn-timer=cuda-event on a CPU was ignored without a word."""
    from factories import attention_suite

    from pytest_attn.engine.threads import usable_cpus

    pytester.makepyfile(test_suite=attention_suite("prefill"))
    too_many = pytester.runpytest(f"--attn-cpu-threads={usable_cpus() + 1}")
    too_many.stderr.fnmatch_lines([f"*--attn-cpu-threads={usable_cpus() + 1}: this process may use {usable_cpus()}"
                                   f" CPUs; give at most {usable_cpus()}, or auto*"])
    both = pytester.runpytest("--attn-case", "seqlen=128,heads=4,head_dim=32,fwd,fwd+bwd")
    both.stderr.fnmatch_lines(["*give one direction, fwd or fwd+bwd (repeat --attn-case for both)*"])
    slash = pytester.runpytest("--attn-case", "seqlen=128,heads=4,head_dim=32,name=a/b")
    slash.stderr.fnmatch_lines(["*name='a/b' must have no spaces, slashes or brackets*"])
    timed = pytester.runpytest("-p", "no:cacheprovider", "--attn-profile=cpu", "--attn-backends=sdpa-math",
                               "--attn-timer=cuda-event", "-k", "tiny-mha-fp32-full-fwd and not fwdbwd",
                               "--attn-baseline=off")
    timed.stdout.fnmatch_lines(["note: --attn-timer=cuda-event has no effect on a CPU*"])


def test_an_adhoc_decode_shape_is_a_decode_case():
    """The README's decode --attn-case collected test_decode[NOTSET] and ran nothing on any machine."""
    from pytest_attn.core.adhoc import parse_case

    assert parse_case("seqlen_q=1,seqlen_k=8192,heads=32,kv_heads=8,head_dim=128,causal").shape.kind == "decode"
    assert parse_case("seqlen_q=4,seqlen_k=4096,heads=28,kv_heads=4,head_dim=128,causal").shape.kind == "decode"
    assert parse_case("seqlen=2048,heads=16,head_dim=128").shape.kind == "prefill"
    assert parse_case("varlen=1,7,128,heads=8,head_dim=64").shape.kind == "varlen"


def test_torchs_dtype_names_are_taken_for_the_short_ones():
    """float16 / bfloat16 / float32 (torch's names) were refused as unknown dtypes."""
    from pytest_attn.core.adhoc import parse_case

    assert opt.dtypes("float16,torch.bfloat16, FP32,half") == ("fp16", "bf16", "fp32", "fp16")
    assert parse_case("seqlen=128,heads=4,head_dim=32,dtype=bfloat16").dtype == "bf16"
    with pytest.raises(argparse.ArgumentTypeError, match="unknown dtype 'float64'"):
        opt.dtypes("float64")


def test_a_misspelled_option_names_the_ones_it_may_mean():
    """pytest said only "unrecognized arguments: --attn-profle=cpu"."""

    def unknown(args):
        return [a for a in args if a.startswith("--attn-")]  # the parser knows none of them

    assert command_line.misspelled(["--attn-profle=cpu", "-q"], unknown) == (
        "unknown pytest-attn option --attn-profle: did you mean --attn-profile?")
    assert "--attn-baselines-dir" in command_line.misspelled(["--attn-basline-dir", "x"], unknown)
    assert command_line.misspelled(["--attn-xyzzy"], unknown) == (
        "unknown pytest-attn option --attn-xyzzy: no such option (pytest --help lists the --attn-* options)")
    assert command_line.misspelled(["--attn-profile=cpu", "suites/"], unknown) is None  # ours: the parser is not asked
    assert command_line.misspelled(["--attn-mine=1"], lambda args: []) is None  # a conftest's own --attn-* option


def test_a_misspelled_option_stops_the_run_at_start_up(pytester):
    pytester.makeconftest("def pytest_addoption(parser):\n    parser.addoption('--attn-mine', default=None)\n")
    pytester.makepyfile(test_x="def test_x():\n    pass\n")
    wrong = pytester.runpytest("--attn-dtype=fp32")
    assert wrong.ret == pytest.ExitCode.USAGE_ERROR
    wrong.stderr.fnmatch_lines(["*unknown pytest-attn option --attn-dtype: did you mean --attn-dtypes?"])
    assert pytester.runpytest("--attn-mine=1", "-p", "no:cacheprovider").ret == pytest.ExitCode.OK


def test_the_command_line_tool_has_a_version_and_a_whole_help(capsys):
    """``pytest-attn --help`` was cut off mid-sentence with raw markup, and there was no --version."""
    from importlib import metadata

    from pytest_attn.verdicts.cli import main

    for flag, code in (("--help", 0), ("--version", 0)):
        with pytest.raises(SystemExit) as done:
            main([flag])
        assert done.value.code == code
    out = capsys.readouterr().out
    assert f"pytest-attn {metadata.version('pytest-attn')}" in out
    assert "``" not in out and "this tool works on their saved JSON." in " ".join(out.split())
