"""The pytest wiring, and nothing else: the entry point ``pytest_attn.plugin`` (``pytest11``).

:mod:`.command_line` adds the options and the hook spec and refuses a misspelled flag; :mod:`.options` declares
every ``--attn-*`` option and converts it; :mod:`.session` resolves them once
at configure and holds every stash key; :mod:`.bench` collects cases, provides the fixtures and hands
each result record to pytest-benchmark; :mod:`.summary` prints the end-of-session summary; :mod:`.fuzz`
wires the Hypothesis suite; :mod:`.gate` wires baselines, verdicts and reports; :mod:`.history` marks runs
cut short; :mod:`.recovery` keeps each case as it ends; :mod:`.signals` makes SIGTERM and SIGHUP stop a run as
Ctrl-C does, and shields the session's end from every signal; :mod:`.hookspecs` declares the
hook for bringing your own back end. The layers below (core, oracle, backends, engine, fuzz, verdicts) know
nothing of pytest; a new option or hook goes here. Loading the plugin imports no torch, no Hypothesis and
touches no GPU.

Modules: :mod:`.command_line`, :mod:`.options`, :mod:`.session`, :mod:`.results` (what the session measured, skipped
and has to say), :mod:`.detect` (is this an attention run), :mod:`.bench`, :mod:`.benchjson` (records as
pytest-benchmark's JSON), :mod:`.gate_inputs` (what the gate needs before the first case), :mod:`.figures` (figures
that need the session), :mod:`.outcomes` (a case skipped or refused), :mod:`.nothing_selected` (why a run selected
no case), :mod:`.hints` (advice valid where the user stands), :mod:`.progress`, :mod:`.summary`, :mod:`.fuzz`,
:mod:`.gate`, :mod:`.second_look` (doubtful cases measured again before the gate), :mod:`.standby` (its process,
started ahead), :mod:`.ab` (the paired A/B), :mod:`.history`, :mod:`.recovery` (each case kept as it ends; a run
that died recovered), :mod:`.signals`, :mod:`.workers` (pytest-xdist workers and shards), :mod:`.sharding` (which
problems a shard runs), :mod:`.scheduling` (the order problems go to the workers), :mod:`.handover` (both ends of
the workers' channel, every key on it), :mod:`.hookspecs`, :mod:`.finish` (the session's end, in order).
"""

from __future__ import annotations

from .session import attn_cases, attn_session, fuzz_targets, prepare_attention_run

# each before the modules that import it (bench imports workers and signals): a plugin module pytest finds already
# imported cannot have its asserts rewritten, and pytest warns so in every session
pytest_plugins = [
    "pytest_attn.plugin.command_line",
    "pytest_attn.plugin.signals",
    "pytest_attn.plugin.handover",
    "pytest_attn.plugin.scheduling",
    "pytest_attn.plugin.workers",
    "pytest_attn.plugin.gate",
    "pytest_attn.plugin.second_look",
    "pytest_attn.plugin.ab",
    "pytest_attn.plugin.summary",
    "pytest_attn.plugin.bench",
    "pytest_attn.plugin.fuzz",
    "pytest_attn.plugin.history",
    "pytest_attn.plugin.recovery",
    "pytest_attn.plugin.finish",
]

__all__ = ["attn_cases", "attn_session", "fuzz_targets", "prepare_attention_run"]
