"""Runs gated as one (``pytest-attn merge --reruns``): the same selection run again, each case's medians kept as
repeats of the GPU that measured each, so the gate judges their centre with the noise of that many runs -- and, where
a case's runs fell on two GPUs (``-n N`` hands cases to whichever GPU is free), with the spread between GPUs of their
mean. Pure: :mod:`.cli` reads the files and gates the result.

Why: on H200s the baseline never saw, a 5 % slowdown read SLOWER on 191-197 of the committed selection's 206 cases in
one run; two runs gated as one read 196-198 on one GPU and 197-203 on two, and 26 clean pairs (on one GPU, on two, and
as -n 2 hands cases out) read 0 SLOWER, 0 FASTER (docs/gpu-validation.md#the-stored-baseline-gate). Each rerun is a
process of its own, as each of the baseline's repeats is, so the run-to-run spread the baseline measured holds between
them.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from ..core.record import Record, is_record
from .baseline import stored_fingerprint
from .fingerprint import SAME_SOFTWARE, differences
from .merge import MergeError
from .repeats import add_repeat, refused_note


def _gpus(run: dict[str, Any]) -> dict[str, str]:
    """Each case's GPU (UUID, else the device's name) in ``run``."""
    out = {}
    for bench in run.get("benchmarks", []):
        info = bench.get("extra_info")
        if is_record(info):
            device = Record.from_json(info).device
            out[bench.get("fullname") or bench.get("name")] = device.uuid or device.name
    return out


def other_gpus(runs: Sequence[tuple[str, dict[str, Any]]]) -> list[str]:
    """A note per rerun that measured cases on other GPUs than the first file did (under ``-n N`` a case goes to
    whichever GPU is free): such a case is the mean over its GPUs, their spread counted (:func:`.fleet.gpu_factor`)."""
    first_name, first = runs[0]
    theirs = _gpus(first)
    notes = []
    for name, run in runs[1:]:
        moved = [(case, theirs[case], gpu) for case, gpu in _gpus(run).items() if theirs.get(case, gpu) != gpu]
        if moved:
            case, was, now = moved[0]
            notes.append(f"{name} measured {len(moved)} case(s) on another GPU than {first_name} did (e.g. {case}:"
                         f" {now}, there {was}): each is gated on the mean over its GPUs, the spread between GPUs"
                         " counted")
    return notes


def _software(runs: Sequence[tuple[str, dict[str, Any]]]) -> None:
    """Refuses a rerun of other software than the first file (another CUDA, torch or library under test)."""
    first_name, first = runs[0]
    stored = stored_fingerprint(first)
    for name, run in runs[1:]:
        mine = stored_fingerprint(run)
        if stored is None or mine is None:
            raise MergeError(f"{first_name if stored is None else name} has no fingerprint (not a pytest-attn run):"
                             " reruns must say what they ran")
        blocking, informing = differences(stored, mine)
        other = blocking + [d for d in informing if d.split(":")[0] in (*SAME_SOFTWARE, *stored.libraries)]
        if other:
            raise MergeError(f"{name} is not a rerun of {first_name}: it measured another device or software"
                             f" ({'; '.join(other)}), and averaging the two would hide the change. Gate each run"
                             " on its own (pytest-attn merge FILE)")


def combine_reruns(runs: Sequence[tuple[str, dict[str, Any]]]) -> tuple[dict[str, Any], list[str]]:
    """``runs`` (file name, JSON) combined: a case in several keeps each run's median as a repeat of the GPU that
    measured it and is gated on their centre; a case in one file keeps its run. Returns the combined run
    (``attn_reruns`` names the files) and what the combination says. Raises :class:`MergeError` where the files
    are not reruns of one software."""
    if len(runs) < 2:
        raise MergeError("--reruns combines two runs or more of the same cases; give the first run and its rerun(s)")
    _software(runs)
    combined = runs[0][1]
    counts = other_gpus(runs)
    for name, run in runs[1:]:
        combined, added, refused = add_repeat(combined, run)
        counts.append(f"{name}: a rerun of {added} case(s){refused_note(refused)}")
    combined = {**combined, "machine_info": runs[0][1].get("machine_info") or {},
                "attn_reruns": [name for name, _ in runs]}
    return combined, counts
