"""pytest-attn: a pytest plugin that benchmarks GPU attention kernels with figures you can trust.

The plugin itself is :mod:`pytest_attn.plugin` (loaded through the ``pytest11`` entry point).
Importing this package imports neither torch nor any kernel library. ``pytest_attn.capture(path)`` records a
model's attention calls as a workload (:mod:`pytest_attn.capture`; the name is also that package's, which
``python -m pytest_attn.capture`` and ``from pytest_attn.capture.sites import ModuleStack`` still reach).
"""

from .capture import capture

__all__ = ["capture"]

__version__ = "0.1.0"
