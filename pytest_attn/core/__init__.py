"""The vocabulary every other layer speaks: pure, and free of torch at import.

An :class:`~pytest_attn.core.case.AttnCase` is one attention problem on one back end; masks, the
FLOP/byte model, peak rates, device facts, the model catalog and ``--attn-case`` parsing describe it;
:mod:`~pytest_attn.core.codec` writes a case as JSON and reads it back; and
:class:`~pytest_attn.core.record.Record` is the one typed result that travels -- to the terminal
table, the gate, reports, plots, baselines, and between processes and machines. Nothing here times,
touches a GPU or reads NVML; the few helpers that build tensors (:mod:`.mask_tensors`,
:mod:`.layouts`) import torch inside the function. Every other layer imports from here; this layer
imports from none of them.
"""
