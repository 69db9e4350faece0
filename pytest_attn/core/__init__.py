"""The vocabulary every other layer speaks: pure, and free of torch at import.

An :class:`~pytest_attn.core.case.AttnCase` is one attention problem on one back end; masks, the
FLOP/byte model, peak rates, device facts, the model catalog and ``--attn-case`` parsing describe it;
:mod:`~pytest_attn.core.codec` writes a case as JSON and reads it back; and
:class:`~pytest_attn.core.record.Record` is the one typed result that travels -- to the terminal
table, the gate, reports, plots, baselines, and between processes and machines. Nothing here times,
touches a GPU or reads NVML; the few helpers that build tensors (:mod:`.mask_tensors`,
:mod:`.layouts`) import torch inside the function. Every other layer imports from here; this layer
imports from none of them.

Modules: :mod:`.case`, :mod:`.forms` (sinks, absorbed MLA, an fp8 KV cache), :mod:`.catalog`, :mod:`.adhoc`
(``--attn-case``), :mod:`.codec`, :mod:`.masks`,
:mod:`.mask_formats`, :mod:`.mask_tensors`, :mod:`.layouts`, :mod:`.flops`, :mod:`.peaks`, :mod:`.metrics`,
:mod:`.device`, :mod:`.kernel_names`, :mod:`.stats`, :mod:`.throttle`, :mod:`.sustained` (the sustained figure),
:mod:`.record`, :mod:`.schedule` (what each test is expected to cost, problems handed to workers longest first),
:mod:`.converters` and :mod:`.percent` (command-line values), :mod:`.files` (JSON read, files written atomically,
never through a planted link), :mod:`.journal` (each measured case kept on disk as it ends), :mod:`.workload`
(a model's captured attention calls: the file format) and :mod:`.replay` (its records as the cases
``--attn-workload`` runs).
"""
