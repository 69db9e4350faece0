"""The paired A/B's verdicts and reports: pure over the pairs' block times and clocks.

Modules: :mod:`.paired` (a case's verdict from its pairs, at equal SM clock where the clocks were measured, and
:class:`~.paired.AbResult`, one case's outcome) and :mod:`.summaries` (the terminal table, the Markdown, CSV and
``ab.json``, over :mod:`pytest_attn.verdicts.render`). The measuring side is :mod:`pytest_attn.engine.ab`.
"""
