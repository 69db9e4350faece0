"""Hypothesis settings profiles for the fuzz suite, registered when the plugin loads.

* ``ci`` -- derandomized and small: the same examples every run, for CI without a GPU (< 1 minute);
* ``gpu`` -- 200 examples per property, no deadline (FlashInfer JIT-compiles on first use), the
  example database on, so a failure replays first next time;
* ``thorough`` -- 2,000 examples per property, for long local runs before trusting a new kernel.

Choose one with Hypothesis' own ``--hypothesis-profile=NAME`` (or ``HYPOTHESIS_PROFILE``); without
either, pytest-attn loads ``ci`` on a machine without a GPU and ``gpu`` on one with, when a fuzz test
is collected. ``--attn-fuzz-examples=N`` keeps the profile but sets its number of examples.
"""

from __future__ import annotations

from hypothesis import HealthCheck, settings

_QUIET = [HealthCheck.too_slow, HealthCheck.filter_too_much, HealthCheck.data_too_large]

settings.register_profile("ci", derandomize=True, max_examples=50, deadline=None, suppress_health_check=_QUIET,
                          print_blob=True)
settings.register_profile("gpu", max_examples=200, deadline=None, suppress_health_check=_QUIET, print_blob=True)
settings.register_profile("thorough", max_examples=2000, deadline=None, suppress_health_check=_QUIET,
                          print_blob=True)


def default_profile(has_gpu: bool) -> str:
    return "gpu" if has_gpu else "ci"


def with_examples(profile: str, examples: int) -> str:
    """Register ``PROFILE-xN``: the named profile with ``max_examples=N`` (``--attn-fuzz-examples``)."""
    name = f"{profile}-x{examples}"
    settings.register_profile(name, parent=settings.get_profile(profile), max_examples=examples)
    return name
