"""This repository's own defaults, for every pytest run inside the checkout (suites, tests, examples).

* FlashInfer's JIT cache goes to ``.ficache/`` in the checkout unless ``FLASHINFER_WORKSPACE_BASE`` is
  set: compiled kernels (30-100 s each the first time) survive between runs, one folder a CI runner
  caches (see .github/workflows/gpu-benchmarks.yml) and a person can delete to start cold.

The plugin itself needs none of this: a project of yours that uses pytest-attn chooses its own.
"""

from __future__ import annotations

import os

import pytest

JIT_CACHE = ".ficache"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", str(config.rootpath / JIT_CACHE))
