"""This repository's own defaults, for every pytest run inside the checkout (suites, tests, examples).

* FlashInfer's JIT cache goes to ``.ficache/`` in the checkout unless ``FLASHINFER_WORKSPACE_BASE`` is
  set: compiled kernels (30-100 s each the first time) survive between runs, one folder a CI runner
  caches (see .github/workflows/gpu-benchmarks.yml) and a person can delete to start cold.
* FlashAttention-4 keeps the kernels its CuTe DSL compiles (1.6-2 s each, one per shape class) in
  ``.fa4cache/`` (its own disk cache, ``FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED``, off by default in
  FA4; set it to 0 to keep it off), unless ``FLASH_ATTENTION_CUTE_DSL_CACHE_DIR`` names another folder.

The plugin itself needs none of this: a project of yours that uses pytest-attn chooses its own.
"""

from __future__ import annotations

import os

import pytest

JIT_CACHE = ".ficache"
FA4_CACHE = ".fa4cache"


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    os.environ.setdefault("FLASHINFER_WORKSPACE_BASE", str(config.rootpath / JIT_CACHE))
    os.environ.setdefault("FLASH_ATTENTION_CUTE_DSL_CACHE_ENABLED", "1")  # read when flash_attn.cute is imported
    os.environ.setdefault("FLASH_ATTENTION_CUTE_DSL_CACHE_DIR", str(config.rootpath / FA4_CACHE))
