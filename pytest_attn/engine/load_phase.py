"""The sustained phase of one case (``--attn-sustained``), on a GPU: the case's call captured many times into one
CUDA graph (its rotated input sets, as the burst timer rotates them; no L2 flush: back to back, as a model runs
it), replayed back to back with the next replay always queued, NVML's SM clock, power and energy counter read
after each replay ends -- until the load has settled and :data:`SETTLED_FOR_S` (and :data:`SETTLED_CALLS`) more
have passed, or the cap.
The readings go to :func:`pytest_attn.core.sustained.sustained`. A call that cannot be captured is replayed
eagerly, the same number of calls between two events. GPU I/O; torch is imported inside the functions."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterator, Sequence
from typing import Any

from ..core.sustained import Reading, settled_at
from .nvml import Nvml
from .timers import CudaGraphTimer, rotation_order

#: A replay of the back-to-back graph lasts about this (a 15 us decode step: some 3,000 calls a replay).
REPLAY_S = 0.05
MAX_CALLS = 4000
#: Once settled, the phase goes on this long: the figures are over at least this much settled load.
SETTLED_FOR_S = 1.5
#: ... and this many calls: NVML's energy counter steps coarsely, and over few long calls it misses (by 9 % over
#: three 0.42 s calls: docs/gpu-validation.md#sustained-load).
SETTLED_CALLS = 10
#: The shortest phase: a load that looks settled at once (a light kernel far from the cap) is still watched.
MIN_PHASE_S = 2.0


def calls_per_replay(call_s: float, sets: int) -> int:
    """Calls in one replay: about :data:`REPLAY_S` of them, in whole passes over the ``sets`` rotated inputs."""
    calls = MAX_CALLS if call_s <= 0 else max(1, min(MAX_CALLS, math.ceil(REPLAY_S / call_s)))
    return sets * math.ceil(calls / sets)


def _replayer(steps: Sequence[Callable[[], Any]], calls: int) -> tuple[Callable[[], None], str]:
    """The replay of ``calls`` calls, and how: a CUDA graph, or eager calls where capture fails."""
    try:
        graph = CudaGraphTimer(steps, calls, lambda: None)
        return graph.replay, f"a CUDA graph of {calls} calls"
    except Exception as exc:  # a library that cannot be captured: eager calls, launched back to back
        import torch

        torch.cuda.synchronize()
        order = rotation_order(calls, len(steps))

        def eager() -> None:
            for i in order:
                steps[i]()

        return eager, f"{calls} eager calls a replay (capture failed: {type(exc).__name__})"


def collect(replays: Iterator[float], calls: int, cap_s: float, nvml: Nvml,
            clock: Callable[[], float] = time.perf_counter) -> list[Reading]:
    """Readings of back-to-back replays (each yields its device time as it ends), NVML read after each, until the
    load has settled and :data:`SETTLED_FOR_S` and :data:`SETTLED_CALLS` more have passed (never before
    :data:`MIN_PHASE_S`), or ``cap_s``."""
    readings: list[Reading] = []
    t0 = clock()
    for gpu_s in replays:
        t = clock() - t0
        readings.append(Reading(t, calls, gpu_s, nvml.sm_clock_mhz(), nvml.power_w(), nvml.energy_mj()))
        if t >= cap_s:
            break
        settled = settled_at(readings) if t >= MIN_PHASE_S else None
        if settled is not None and t - settled >= SETTLED_FOR_S \
                and sum(r.calls for r in readings if r.t_s > settled) > SETTLED_CALLS:
            break
    return readings


def run_load_phase(steps: Sequence[Callable[[], Any]], call_s: float, cap_s: float,
                   nvml: Nvml) -> tuple[list[Reading], str]:
    """Replay back to back until settled (and :data:`SETTLED_FOR_S` more) or ``cap_s``; the readings and how
    the calls were replayed."""
    import torch

    calls = calls_per_replay(call_s, len(steps))
    replay, how = _replayer(steps, calls)
    replay()  # the first replay uploads the graph
    torch.cuda.synchronize()

    def replays() -> Iterator[float]:
        """Each replay's device time as it ends, the next one always queued before it is waited for."""
        pending: list[tuple[Any, Any]] = []

        def launch() -> None:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            replay()
            end.record()
            pending.append((start, end))

        launch()
        while True:
            launch()
            start, end = pending.pop(0)
            end.synchronize()
            yield start.elapsed_time(end) / 1e3

    readings = collect(replays(), calls, cap_s, nvml)
    torch.cuda.synchronize()
    return readings, how
