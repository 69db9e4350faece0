"""Measures one case on one device; knows nothing of pytest.

:mod:`.runner` takes a case end to end -- can it run here, inputs (:mod:`.inputs`), the check against
the oracle, warm-up and sampling (:mod:`.sampling`, stopping rules in :mod:`.stopping`), the timer
(:mod:`.timers`: one factory for CPU, CUDA-event, CUDA-graph and kernel-sum timers and their
fall-backs) -- and returns a :class:`~pytest_attn.core.record.Record`. Around it: NVML readings
(:mod:`.nvml`), the device probe (:mod:`.probe`), clock locking (:mod:`.clocks`), measured ceilings
(:mod:`.ceilings`), the profiler, NVTX and traces (:mod:`.profiler`), HBM traffic through ncu
(:mod:`.hbm`) and the deliberate slowdown that proves the gate (:mod:`.slowed`). A new timer or
measurement goes here; it reports through the record, never through pytest.

Modules: :mod:`.runner`, :mod:`.measure` (one case: set up, warm up, the timer, samples, the record), :mod:`.failures`
(a back end's own code failing, in three lines), :mod:`.settings`, :mod:`.inputs`, :mod:`.timers`, :mod:`.sampling`,
:mod:`.stopping`, :mod:`.spotcheck` (what a kernel cannot get away with), :mod:`.load_phase` (the sustained phase),
:mod:`.nvml`, :mod:`.probe`, :mod:`.clocks`, :mod:`.ceilings`, :mod:`.profiler`, :mod:`.hbm`, :mod:`.slowed`,
:mod:`.compile` (kernel modules built before the first sample), :mod:`.threads`; the paired A/B's measuring side in
one package, :mod:`.ab`.
"""
