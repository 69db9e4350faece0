"""A run added to a stored baseline as repeats: each case keeps every run's median, the GPU that measured it and
its SM clock, and is gated on the mean of its GPUs' medians. Pure: :mod:`.baseline` reads and writes the file."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..core.record import Record, TimerPin, is_record
from ..core.stats import OUTLIER_FACTOR, median, times_off
from .fleet import center
from .runs import repeat_gpus


def add_repeat(old: dict[str, Any], new: dict[str, Any], *, restart_retimed: bool = False,
               ) -> tuple[dict[str, Any], int, list[str]]:
    """``new`` (a run) added to the stored baseline ``old`` as one more independent repeat: each case in
    both keeps the median of every repeat (``timing.repeats_s`` of its record), the GPU that measured it
    (``timing.repeats_gpu``: the between-GPU spread is read from them, :mod:`.fleet`) and its SM clock
    (``clocks.repeats_sm_clock_mhz``, where every repeat recorded one), and is gated on the mean of its GPUs'
    medians (:func:`.fleet.center`); cases only in ``old`` stay as they were. A case whose new median is more than
    :data:`~pytest_attn.core.stats.OUTLIER_FACTOR` times off its stored repeats' median is not added to:
    it stays as stored, and is named in the third item returned (with both medians). One timed by another timer
    is refused too, or with ``restart_retimed`` starts over from ``new`` (named, :data:`RESTARTED`). Returns the
    merged run, how many cases gained a repeat, and those refused or restarted."""
    stored = {(b.get("fullname") or b.get("name")): b for b in old["benchmarks"]}
    merged, added, refused = [], 0, []
    for bench in new["benchmarks"]:
        name = bench.get("fullname") or bench.get("name")
        info = bench.get("extra_info")
        before = stored.pop(name, None)
        if before is None or not is_record(info):
            merged.append(bench)
            continue
        record = Record.from_json(info)
        stored_repeats, stored_clocks, stored_gpus = _stored_repeats(before)
        reference = median(stored_repeats)
        pin = _stored_pin(before)
        if pin is not None and (pin.timer, pin.calls_per_sample) != (record.timing.timer,
                                                                    record.timing.calls_per_sample):
            refused.append(f"{RESTARTED}{name}: timed by {record.timing.pin.describe()} (its {len(stored_repeats)}"
                           f" stored repeat(s), by {pin.describe()}, dropped)" if restart_retimed else
                           f"{name}: timed by {record.timing.pin.describe()} here, by {pin.describe()} in the stored"
                           " repeats (a repeat must be the same quantity)")
            merged.append(_first_repeat(bench, record) if restart_retimed else before)  # restarted: starts over
            continue
        if times_off(record.median_s, reference) > OUTLIER_FACTOR:
            refused.append(f"{name}: {record.median_s * 1e3:.4g} ms, {_how_far(record.median_s, reference)} the stored"
                           f" repeats' median {reference * 1e3:.4g} ms")
            merged.append(before)
            continue
        repeats = (*stored_repeats, record.median_s)
        gpus = (*stored_gpus, record.device.uuid or "")
        clocks = _all_known((*stored_clocks, record.clocks.sm_clock_mhz), len(repeats))
        record = dataclasses.replace(record, timing=dataclasses.replace(record.timing, repeats_s=repeats,
                                                                        repeats_gpu=gpus),
                                     clocks=dataclasses.replace(record.clocks, repeats_sm_clock_mhz=clocks))
        merged.append({**bench, "extra_info": record.to_json(),
                       "stats": {**bench["stats"], "median": center(repeats, gpus)}})
        added += 1
    merged.extend(stored.values())
    return {**new, "benchmarks": merged}, added, refused


def _first_repeat(bench: dict[str, Any], record: Record) -> dict[str, Any]:
    """``bench`` as a case's first repeat: its median, GPU and clock as the repeats that later runs add to."""
    record = dataclasses.replace(
        record, timing=dataclasses.replace(record.timing, repeats_s=(record.median_s,),
                                           repeats_gpu=(record.device.uuid or "",)),
        clocks=dataclasses.replace(record.clocks, repeats_sm_clock_mhz=_all_known((record.clocks.sm_clock_mhz,), 1)))
    return {**bench, "extra_info": record.to_json()}


def _stored_pin(bench: dict[str, Any]) -> TimerPin | None:
    info = bench.get("extra_info")
    return Record.from_json(info).timing.pin if is_record(info) else None


def _how_far(value: float, reference: float) -> str:
    return f"{value / reference:.3g}x" if value > reference else f"1/{reference / value:.3g} of"


#: How :func:`add_repeat` marks a case it restarted among those it did not add to.
RESTARTED = "restarted: "


def refused_note(lines: list[str], shown: int = 10) -> str:
    """The cases :func:`add_repeat` did not add to, for the saving line."""
    restarted = [line.removeprefix(RESTARTED) for line in lines if line.startswith(RESTARTED)]
    refused = [line for line in lines if not line.startswith(RESTARTED)]
    note = ""
    if restarted:
        more = [f"  ... and {len(restarted) - shown} more"] if len(restarted) > shown else []
        note = "\n".join([f"; {len(restarted)} case(s) restarted from this run (--restart-retimed): their stored"
                          " repeats were taken by another timer", *(f"  {line}" for line in restarted[:shown]), *more])
    if not refused:
        return note
    more = [f"  ... and {len(refused) - shown} more"] if len(refused) > shown else []
    return (note + "\n" if note else "") + "\n".join([
        f"; refused for {len(refused)} case(s): their median here is more than {OUTLIER_FACTOR:g}x off the stored"
        " repeats' (a busy machine, another build, a throttled GPU?), or was taken by another timer. They keep their"
        " stored repeats. Rerun --attn-add-to-baseline; if this run is right and the stored one odd, record anew"
        " with --attn-save-baseline (another timer: pytest-attn baseline add --restart-retimed):",
        *(f"  {line}" for line in refused[:shown]), *more])


def _all_known(clocks: tuple[float | None, ...], repeats: int) -> tuple[float, ...]:
    """``clocks`` when there is one for each of ``repeats``, else () (the clocks of the repeats unknown)."""
    known = tuple(c for c in clocks if c)
    return known if len(known) == len(clocks) == repeats else ()


def _stored_repeats(bench: dict[str, Any]) -> tuple[tuple[float, ...], tuple[float | None, ...], tuple[str, ...]]:
    """A stored case's repeats: the median of each run, each run's SM clock where its record knows them all
    (else fewer clocks than repeats), and the GPU of each (:func:`.runs.repeat_gpus`)."""
    info = bench.get("extra_info")
    single = (float(bench["stats"]["median"]),)
    if not is_record(info):
        return single, (), ("",)
    record = Record.from_json(info)
    if record.timing.repeats_s:
        return record.timing.repeats_s, record.clocks.repeats_sm_clock_mhz, repeat_gpus(record)
    return single, (record.clocks.sm_clock_mhz,), (record.device.uuid or "",)
