"""Hypothesis fuzzing of back ends against the oracle.

:mod:`.strategies` draws cases (ragged batches, tile-edge and prime lengths, every GQA ratio, masks,
scales); :mod:`.space` finds what a back end takes by asking its ``supports()``; :mod:`.fuzzer` runs the
property per relation of lengths and counts its reach; :mod:`.example` runs one example end to end and
reports a failure with a replay command (no Hypothesis there); :mod:`.ledger` lists the
libraries' own known failures; :mod:`.profiles` holds the Hypothesis settings profiles. ``python -m
pytest_attn.fuzz '<case json>'`` replays a failure. It knows nothing of pytest: a back end that cannot
be fuzzed here is a value (:class:`~.fuzzer.Refused`) the plugin turns into a skip. The strategies
and the ledger live here rather than beside the oracle because only fuzzing needs Hypothesis: the
benchmark path never imports it.

Modules: :mod:`.strategies`, :mod:`.space`, :mod:`.fuzzer`, :mod:`.example`, :mod:`.ledger`, :mod:`.profiles`,
:mod:`.__main__` (the replay command).
"""
