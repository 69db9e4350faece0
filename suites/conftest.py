"""Settings for the suites users run (not for the plugin's own tests). Copy it beside your own suite."""

from __future__ import annotations

import pytest

from pytest_attn.plugin import prepare_attention_run


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # An attention run: pytest-benchmark's machine_info gets the GPU, local history is kept per GPU model
    # (.benchmarks/<gpu-key>/), and fuzz tests run under pytest-attn's Hypothesis profile.
    prepare_attention_run(config)
    # Save every run (pytest-benchmark's --benchmark-autosave, into .benchmarks/), so that the next
    # `pytest suites/ --benchmark-compare` has a run to compare with. Runs before pytest-benchmark
    # reads its options.
    if not config.getoption("benchmark_disable", False) and not config.getoption("benchmark_autosave"):
        from pytest_benchmark.utils import get_tag  # the name --benchmark-autosave itself uses

        config.option.benchmark_autosave = get_tag()
