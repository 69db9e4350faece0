"""Settings for the suites users run (not for the plugin's own tests)."""

from __future__ import annotations

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    # Save every run (pytest-benchmark's --benchmark-autosave, into .benchmarks/), so that the next
    # `pytest suites/ --benchmark-compare` has a run to compare with. Runs before pytest-benchmark
    # reads its options.
    if not config.getoption("benchmark_disable", False) and not config.getoption("benchmark_autosave"):
        from pytest_benchmark.utils import get_tag  # the name --benchmark-autosave itself uses

        config.option.benchmark_autosave = get_tag()
