"""Runs of one GPU gated as one (``pytest-attn merge --reruns``): the same selection run again on the GPU that ran
it, each case's medians taken as repeats of that GPU, so the gate judges their mean with the noise of that many runs.
Pure: :mod:`.cli` reads the files and gates the result.

Why: on a GPU the baseline never saw, a 5 % slowdown read SLOWER on 191-197 of the committed H200 selection's 206
cases in one run; two runs of one GPU gated as one read 196-197, and clean pairs on six GPUs read 0 SLOWER, 0 FASTER
(docs/gpu-validation.md#the-stored-baseline-gate). Each rerun is a process of its own, as the baseline's
repeats are, so the run-to-run spread the baseline measured holds between them. Two GPUs are refused: their
offset is what the gate allows for between a run and its baseline, not between the runs it averages.
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


def two_gpus(runs: Sequence[tuple[str, dict[str, Any]]]) -> str | None:
    """Why ``runs`` are not reruns of one GPU (a case measured on another GPU than in the first file), or None."""
    first_name, first = runs[0]
    theirs = _gpus(first)
    for name, run in runs[1:]:
        moved = [(case, theirs[case], gpu) for case, gpu in _gpus(run).items() if theirs.get(case, gpu) != gpu]
        if moved:
            case, was, now = moved[0]
            return (f"{name} measured {len(moved)} case(s) on another GPU than {first_name} did ({case}: {now} against"
                    f" {was}): reruns are of one GPU, as two GPUs of a model differ by a few % on some cases. Run"
                    " each rerun on the GPU of the first, in one process (CUDA_VISIBLE_DEVICES=<that GPU>, no -n), or"
                    " each --attn-shard=I/N on the same GPU both times")
    return None


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
    """``runs`` (file name, JSON), each a run of one GPU, combined: a case in several keeps each run's median as a
    repeat of that GPU and is gated on their mean; a case in one file keeps its run. Returns the combined run
    (``attn_reruns`` names the files) and what the combination says. Raises :class:`MergeError` where the files
    are not reruns of one GPU and one software."""
    if len(runs) < 2:
        raise MergeError("--reruns combines two runs or more of one GPU; give the first run and its rerun(s)")
    moved = two_gpus(runs)
    if moved:
        raise MergeError(moved)
    _software(runs)
    combined = runs[0][1]
    counts = []
    for name, run in runs[1:]:
        combined, added, refused = add_repeat(combined, run)
        counts.append(f"{name}: a rerun of {added} case(s){refused_note(refused)}")
    combined = {**combined, "machine_info": runs[0][1].get("machine_info") or {},
                "attn_reruns": [name for name, _ in runs]}
    return combined, counts
