"""Shards merged into one run: the pytest-benchmark JSON files of runs that each measured a share of
the problems (``--attn-shard=I/N``, several runners or GPU groups) combined into the JSON one run of
them all would have written, so one summary, report and gate come out of it. Pure.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.files import InputError
from .runs import Bench, benches, records

#: what a shard that measured nothing writes beside its empty ``benchmarks`` (plugin.workers.write_empty_shard)
NOTHING = "attn_measured_nothing"


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
    merged.pop("attn_shard", None)  # the whole run is no shard: kept, gating its JSON again read "shard 2/2 is missing"
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


def models_problem(runs: Sequence[tuple[str, dict[str, Any]]]) -> str | None:
    """Why ``runs`` cannot be merged for measuring on more than one GPU model, or None. Each case is gated
    against its own model's baseline, and shards split the problems: each model's gate would see its shards'
    share of the cases and find the rest missing. Pure."""
    models: dict[str, list[str]] = {}
    for name, run in runs:
        for model in sorted({r.device.name for r in records(run)}):
            models.setdefault(model, []).append(name)
    if len(models) < 2:
        return None
    which = "; ".join(f"{', '.join(files)} on {model}" for model, files in models.items())
    return (f"the files were measured on {len(models)} GPU models ({which}): each case is gated against its own"
            " model's baseline, so each model's gate would see only its shards' share of the cases. Run every"
            " shard on runners of one GPU model (a runner label per model), or merge each model's shards on"
            " their own")


def _reasons(counted: Any) -> str:
    pairs = [(str(r), int(n)) for r, n in counted if isinstance(n, int)] if isinstance(counted, list) else []
    shown = "; ".join(f"{n} x {r}" for r, n in pairs[:3])
    return shown + (f"; and {len(pairs) - 3} more" if len(pairs) > 3 else "")


def empty_shards(runs: Sequence[tuple[str, dict[str, Any]]]) -> tuple[list[str], list[str]]:
    """(problems, notes) of the files that hold no benchmark. A shard that selected no case (more shards than
    problems) is a note; one whose cases were all skipped or failed, or a file that does not say why it is
    empty, is a problem: merged, it would gate a share of the run as if it were the whole. Pure."""
    problems, notes = [], []
    for name, run in runs:
        if run.get("benchmarks"):
            continue
        mark = run.get("attn_shard") if isinstance(run.get("attn_shard"), dict) else {}
        shard = f"shard {mark.get('index')}/{mark.get('count')} ({name})" if mark else name
        why = run.get(NOTHING)
        if not isinstance(why, dict):
            problems.append(f"{name} holds no benchmarks and does not say why (pytest-attn writes why into a"
                            " shard that measured nothing): was its run cut short, or is it another file?")
            continue
        selected, skipped, failed = why.get("selected", 0), why.get("skipped", 0), why.get("failed", 0)
        if not selected:
            notes.append(f"{shard} selected no case (more shards than problems): nothing to merge from it")
            continue
        how = []
        if skipped:
            how.append(f"{'its cases were all' if skipped == selected else f'{skipped} of its cases were'} skipped"
                       f" ({_reasons(why.get('reasons'))})")
        if failed:
            how.append(f"{failed} failed (its job's log says why)")
        problems.append(f"{shard} measured nothing: {', '.join(how) or f'none of its {selected} cases ran'}")
    return problems, notes


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
