"""Shards merged into one run: the pytest-benchmark JSON files of runs that each measured a share of
the problems (``--attn-shard=I/N``, several runners or GPU groups) combined into the JSON one run of
them all would have written, so one summary, report and gate come out of it. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.files import InputError
from .runs import Bench, benches


class MergeError(InputError):
    """Shards that cannot be one run; the message names the files."""


def merge_runs(runs: Sequence[tuple[str, dict[str, Any]]]) -> dict[str, Any]:
    """``runs`` as (file name, JSON) pairs merged: every benchmark once (one measured twice is an
    error naming both files), the devices of every shard in ``machine_info.attn_devices``, the shards'
    names in ``attn_shards``, and ``attn_partial`` when any shard was cut short."""
    if not runs:
        raise MergeError("no runs to merge")
    seen: dict[str, str] = {}
    benchmarks: list[dict[str, Any]] = []
    devices: dict[str, Any] = {}
    partial = []
    for name, run in runs:
        for bench in run.get("benchmarks", []):
            key = bench.get("fullname") or bench.get("name")
            if key in seen:
                raise MergeError(f"{key} is in both {seen[key]} and {name}: shards must not overlap (run each"
                                 " with its own --attn-shard=I/N)")
            seen[key] = name
            benchmarks.append(bench)
        info = run.get("machine_info") or {}
        for device in info.get("attn_devices") or [info.get("attn_device")]:
            if isinstance(device, dict):
                devices[str(device.get("uuid") or device.get("name"))] = device
        if run.get("attn_partial"):
            partial.append(f"{name}: {run['attn_partial'].get('reason', 'stopped early')}")
    first = runs[0][1]
    merged = {**first, "benchmarks": benchmarks, "attn_shards": [name for name, _ in runs]}
    merged["machine_info"] = {**(first.get("machine_info") or {}), "attn_devices": list(devices.values())}
    merged.pop("attn_partial", None)
    if partial:
        merged["attn_partial"] = {"reason": "; ".join(partial), "cases_measured": len(benchmarks),
                                  "cases_selected": None}
    return merged


def shard_problems(runs: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    """Why ``runs`` are not one whole sharded run, or [] (they are: every shard ``I/N`` of one selection,
    once; or runs that are not shards at all). Each problem names the files and the shard. Pure."""
    marks = {name: run.get("attn_shard") for name, run in runs}
    if not any(marks.values()):
        return []
    problems = [f"{name} is not a shard (run without --attn-shard)" for name, mark in marks.items() if not mark]
    shards = {name: mark for name, mark in marks.items() if isinstance(mark, dict)}
    kinds = {(m.get("count"), m.get("selection")) for m in shards.values()}
    if len(kinds) > 1:
        problems.append("the shards are of different runs: " + ", ".join(
            f"{name} is {m.get('index')}/{m.get('count')} of selection {m.get('selection')} ({m.get('problems')}"
            " problems)" for name, m in shards.items()))
        return problems
    count = next(iter(kinds))[0]
    seen: dict[Any, list[str]] = {}
    for name, mark in shards.items():
        seen.setdefault(mark.get("index"), []).append(name)
    problems += [f"shard {i}/{count} is given twice ({', '.join(names)})"
                 for i, names in seen.items() if len(names) > 1]
    have = ", ".join(f"{name} is {m.get('index')}/{count}" for name, m in shards.items())
    problems += [f"shard {i}/{count} is missing (have: {have})" for i in range(1, (count or 0) + 1) if i not in seen]
    return problems


def by_device(run: dict[str, Any]) -> dict[str, dict[str, Bench]]:
    """The run's benchmarks per device model (the gate compares each with its own model's baseline);
    benchmarks without a record go with the run's own device."""
    info = run.get("machine_info") or {}
    default = str((info.get("attn_device") or {}).get("name") or "unknown")
    out: dict[str, dict[str, Bench]] = {}
    for name, bench in benches(run).items():
        model = bench.record.device.name if bench.record is not None else default
        out.setdefault(model, {})[name] = bench
    return out
