"""Repository-level pytest configuration: Hypothesis settings profiles. No GPU work here."""

from __future__ import annotations

import os

from hypothesis import HealthCheck, settings

# ci: derandomized and small, for CPU CI; gpu: more examples, no deadline (kernels JIT-compile);
# thorough: long local runs. Pick one with --hypothesis-profile=NAME.
settings.register_profile("ci", derandomize=True, max_examples=30, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("gpu", max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
settings.register_profile("thorough", max_examples=2000, deadline=None,
                          suppress_health_check=[HealthCheck.too_slow])
if os.environ.get("CI"):
    settings.load_profile("ci")
