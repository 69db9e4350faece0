"""pytest-attn: a pytest plugin that benchmarks GPU attention kernels with figures you can trust.

The plugin itself is :mod:`pytest_attn.plugin` (loaded through the ``pytest11`` entry point).
Importing this package imports neither torch nor any kernel library.
"""

__version__ = "0.1.0"
