from __future__ import annotations

import argparse

import pytest

from pytest_attn import options as opt


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
    for bad in ("0", "1.5", "x"):
        with pytest.raises(argparse.ArgumentTypeError, match="precision"):
            opt.precision(bad)
    assert opt.positive_float("--attn-peak-tflops")("989") == 989.0
    with pytest.raises(argparse.ArgumentTypeError, match="--attn-peak-tflops must be positive"):
        opt.positive_float("--attn-peak-tflops")("-1")
    with pytest.raises(argparse.ArgumentTypeError, match=">= 5"):
        opt.min_samples("3")


def test_backend_names_resolve_against_the_registry():
    o = opt.AttnOptions(backends=("default", "reference"))
    assert o.resolve_backends(["a", "b", "reference"], ["a", "b"]) == ("a", "b", "reference")
    assert opt.AttnOptions(backends=("all",)).resolve_backends(["a", "b"], ["a"]) == ("a", "b")
    with pytest.raises(ValueError, match="unknown back end 'flash'; valid: a, b"):
        opt.AttnOptions(backends=("flash",)).resolve_backends(["a", "b"], ["a"])


def test_stop_rule_from_profile_and_override():
    assert opt.AttnOptions().stop_rule("cpu").max_time_s == 0.5
    assert opt.AttnOptions(max_time_s=7.0, precision=0.005).stop_rule("smoke").max_time_s == 7.0
