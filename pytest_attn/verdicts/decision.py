"""One gate decision, the same for a pytest session and for ``pytest-attn merge``: results of one device
model against a baseline -- refused if the baseline is another device's, else verdicts, the lines that
explain them, and whether the run passes. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.record import Record
from .baseline import stored_device, stored_fingerprint
from .fingerprint import Fingerprint, differences, fingerprint_of
from .reports import counts, terminal_lines
from .rule import (
    DEFAULT_FAIL_ON,
    Comparison,
    Noise,
    Thresholds,
    Z,
    compare,
    matched,
    regressions,
)
from .runs import benches, by_name, partial_note


@dataclass
class Outcome:
    """What the gate decided for one device model."""

    status: str  # "pass", "fail" or "error"
    lines: list[str]
    comparisons: list[Comparison] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def by_device(records: Sequence[Record], cpu_threads: str | None = None, libraries: Mapping[str, str] | None = None
              ) -> dict[str, tuple[Fingerprint, list[Record]]]:
    """Records per device model (a baseline is per model: several GPUs of one model share it), each
    model with the fingerprint of its first record's device (and ``libraries``, the run's versions of them)."""
    out: dict[str, tuple[Fingerprint, list[Record]]] = {}
    for r in records:
        fp = fingerprint_of(r.device, r.clocks.lock, cpu_threads, libraries)
        out.setdefault(fp.key, (fp, []))[1].append(r)
    return out


def refusal(base: dict[str, Any], name: str, fp: Fingerprint) -> tuple[str | None, list[str]]:
    """Why ``base`` cannot gate results of ``fp``'s device (another device), and the notes for one that
    can (software or settings that differ)."""
    stored = stored_fingerprint(base)
    if stored is not None:
        blocking, informing = differences(stored, fp)
        if blocking:
            return (f"baseline {name} was recorded on {stored.device}; this run is on {fp.device}"
                    f" ({'; '.join(blocking)}): not compared. Record one for this device with --attn-save-baseline"
                    ), []
        return None, [f"differs from the baseline: {d}" for d in informing]
    device = stored_device(base)
    if device is not None and device != fp.device:
        return (f"baseline {name} was recorded on {device}; this run is on {fp.device}: not compared. Record one"
                " for this device with --attn-save-baseline"), []
    return None, [f"baseline {name} has no fingerprint: it cannot be checked to be from this device"]


def gpu_notes(comparisons: Sequence[Comparison], shown: int = 4) -> list[str]:
    """Which cases the between-GPU noise holds back -- their noise band reaches half the threshold only because
    of it -- and what would sharpen them: repeats from more GPUs of the model in the baseline."""
    held = []
    for c in comparisons:
        if not c.gpu_noise or c.noise is None or c.threshold is None:
            continue
        rest = math.sqrt(max(0.0, c.noise**2 - c.gpu_noise**2))
        if c.noise >= c.threshold / 2 > rest:
            held.append(c)
    if not held:
        return []
    sources = {c.gpu_source for c in held}
    one_gpu = sources == {"allowance"}
    why = ("their baseline measured each on one GPU, so the allowance for two GPUs stands in" if one_gpu
           else "their baseline's GPUs disagree on them, or measured them on one GPU")
    named = ", ".join(f"{c.name} (+-{c.noise:.1%}, {c.gpu_noise / (c.noise or 1):.0%} of it between GPUs)"
                      for c in sorted(held, key=lambda x: -x.gpu_noise)[:shown])
    more = f" and {len(held) - shown} more" if len(held) > shown else ""
    return [f"{len(held)} case(s) would gate more sharply with more GPUs in their baseline ({why}): {named}{more}."
            f" Add repeats from other GPUs of the model: --attn-add-to-baseline on each, or pytest-attn baseline"
            f" add BASELINE RUN.json ... (a noise band is {Z:g} x sigma)"]


def gate(records: Sequence[Record], base: dict[str, Any], name: str, fp: Fingerprint, thresholds: Thresholds,
         fail_on: Sequence[str] = DEFAULT_FAIL_ON, named: bool = True, width: int | None = None) -> Outcome:
    """Verdicts for ``records`` (one device model) against the run ``base``. ``named``: the user named
    the baseline (a run that matches none of it then fails); else it is the one stored for the device,
    and a run of another selection (one suite, ``-k serving``) is not gated, with a note saying so."""
    refused, notes = refusal(base, name, fp) if base.get("benchmarks") else (None, [])
    if refused:
        return Outcome("error", [f"error: {refused}"])
    partial = partial_note(base)
    if partial:
        notes.append(f"the baseline is a partial run: {partial}")
    old, new = benches(base), by_name(records)
    noise = Noise.of(old, new, cpu=fp.kind != "cuda")
    comparisons = compare(old, new, thresholds, noise)
    if old:
        notes.append(noise.describe())
    notes += gpu_notes(comparisons)
    lines = terminal_lines(comparisons, name, notes, width)
    failing = regressions(comparisons, fail_on)
    if old and not matched(comparisons):
        nothing = (f"no case of this run is in the baseline {name} ({len(old)} cases there, {len(new)} here):"
                   " nothing was compared")
        if named:
            lines.append(f"error: {nothing}. Run the baseline's selection, or record a baseline for this one")
            return Outcome("fail", lines, comparisons, notes)
        if not failing:  # (with --attn-fail-on=missing, its MISSING cases still fail the run, below)
            return Outcome("pass", [f"not gated: {nothing} -- this run is another selection than the stored"
                                    " baseline's. To gate it, record a baseline of its own (--attn-save-baseline"
                                    " --attn-baselines-dir=DIR) and gate with --attn-baseline=PATH"],
                           comparisons, notes)
    if failing:
        lines.append(f"failed: {counts(failing)} (--attn-fail-on={','.join(v.lower() for v in fail_on)})")
        return Outcome("fail", lines, comparisons, notes)
    return Outcome("pass", lines, comparisons, notes)

