"""Workload capture: the attention calls a model makes, recorded in the plugin's terms and written as a
workload file (:mod:`pytest_attn.core.workload`) that ``--attn-workload`` replays. It sits beside
``backends/``: it wraps the same libraries' public entry points, but to record calls, not to make them.

``with pytest_attn.capture("llama.workload.json"): model(x)`` patches ``F.scaled_dot_product_attention``,
flash-attn's ``flash_attn_func`` / ``flash_attn_varlen_func`` / ``flash_attn_with_kvcache`` (FA2, FA3 and FA4's
``flash_attn.cute``) and FlashInfer's
single calls and batch wrappers (``plan`` / ``run``) where they import, records each call's shape after the
library returned (outputs untouched), and restores them all on the way out. ``python -m pytest_attn.capture
OUT.json script.py [args]`` runs a script under capture.

Modules: :mod:`.patching` (the context manager and the patches), :mod:`.recorder` (identical calls folded into
one record), :mod:`.sites` (the ``nn.Module`` path of a call), :mod:`.sdpa_calls`, :mod:`.fa_calls` and
:mod:`.fi_calls` (each library's calls read into a :class:`~pytest_attn.core.workload.Call`),
:mod:`.mask_summary` (a boolean or additive mask in the plugin's terms), :mod:`.tensors` (what they share),
:mod:`.command` (the script runner) and :mod:`.__main__` (``python -m pytest_attn.capture``).
"""

from __future__ import annotations

from .patching import Capture, CaptureError, capture

__all__ = ["Capture", "CaptureError", "capture"]
