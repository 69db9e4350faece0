"""One gate decision, the same for a pytest session and for ``pytest-attn merge``: results of one device
model against a baseline -- refused if the baseline is another device's, else verdicts, the lines that
explain them, and whether the run passes. Pure.

A run that compared nothing passes only where it is another suite entirely: none of the test files it selected
holds a case of the baseline. Then it is NOT GATED, and says so first. Where it selected such a file (another
``--attn-backends``, ``--attn-dtypes`` or profile), or named the baseline, it fails, naming what differs.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from ..core.record import Record
from .baseline import stored_device, stored_fingerprint
from .fingerprint import Fingerprint, differences, fingerprint_of
from .layout import printable
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
from .runs import Bench, benches, by_name, partial_note
from .selection import Selection, counted_files, shared_files, split_missing, what_differs

#: A case its baseline measured on fewer GPUs is compared with a rough centre: on another GPU the between-GPU part
#: of its noise is tau x sqrt(1 + 1/G) (verdicts/fleet.py), which a third GPU and more narrow by 13 % at most.
FEW_GPUS = 3


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


def own_gpu_note(comparisons: Sequence[Comparison]) -> list[str]:
    """How many cases were compared with this run's own GPU's repeats alone (none: nothing to say)."""
    own = [c.own_repeats for c in comparisons if c.own_repeats]
    if not own:
        return []
    return [f"{len(own)} case(s) compared with the repeats this GPU measured ({min(own)}-{max(own)} each): its own"
            " offset cancels, so no between-GPU noise is added (the baseline's other GPUs are left out for them)"]


def gpu_notes(comparisons: Sequence[Comparison], shown: int = 4) -> list[str]:
    """Which cases the between-GPU noise holds back -- their noise band reaches half the threshold only because
    of it -- and what would sharpen them: this GPU's own repeats in the baseline (its offset then cancels), and
    for a case its baseline measured on fewer than :data:`FEW_GPUS` GPUs, repeats from more GPUs."""
    held = []
    for c in comparisons:
        if not c.gpu_noise or c.noise is None or c.threshold is None:
            continue
        rest = math.sqrt(max(0.0, c.noise**2 - c.gpu_noise**2))
        if c.noise >= c.threshold / 2 > rest:
            held.append(c)
    if not held:
        return []
    named = ", ".join(f"{printable(c.name)} (+-{c.noise:.1%}, {c.gpu_noise / (c.noise or 1):.0%} of it between GPUs)"
                      for c in sorted(held, key=lambda x: -x.gpu_noise)[:shown])
    more = f" and {len(held) - shown} more" if len(held) > shown else ""
    gpus = {c.name: len({g for g in (c.baseline.repeats_gpu if c.baseline else ()) if g}) for c in held}
    few = [c for c in held if gpus[c.name] < FEW_GPUS]
    one = all(gpus[c.name] <= 1 for c in few)
    fewer = (f"; {len(few)} of them the baseline measured on fewer than {FEW_GPUS} GPUs"
             f"{' (one: the allowance for two GPUs stands in)' if one else ''}: repeats from more GPUs of the model"
             " narrow those too" if few else "")
    return [f"{len(held)} case(s) held back by how much GPUs of the model differ on them (their noise band reaches half"
            f" the threshold only with the between-GPU part): {named}{more}. The own repeats of the GPU that ran a case"
            " take that part away: add two clean runs of each GPU to the baseline (--attn-add-to-baseline on each, or"
            f" pytest-attn baseline add BASELINE RUN.json ...), then a case is gated against its GPU's repeats, its"
            f" offset cancelled{fewer}"
            f" (a noise band is {Z:g} x sigma)"]


def gate(records: Sequence[Record], base: dict[str, Any], name: str, fp: Fingerprint, thresholds: Thresholds,
         fail_on: Sequence[str] = DEFAULT_FAIL_ON, named: bool = True, width: int | None = None,
         selection: Selection | None = None) -> Outcome:
    """Verdicts for ``records`` (one device model) against the run ``base``. ``named``: the user named
    the baseline (a run that matches none of it then fails); else it is the one stored for the device.
    ``selection``: what this run selected (None: not known, as in a merge of shards): a baseline case it
    selected and did not measure is MISSING, one it did not select UNSELECTED (:mod:`.selection`)."""
    refused, notes = refusal(base, name, fp) if base.get("benchmarks") else (None, [])
    if refused:
        return Outcome("error", [f"error: {printable(refused)}"])
    partial = partial_note(base)
    if partial:
        notes.append(f"the baseline is a partial run: {printable(partial)}")
    old, new = benches(base), by_name(records)
    noise = Noise.of(old, new, cpu=fp.kind != "cuda")
    comparisons, said = split_missing(compare(old, new, thresholds, noise), selection)
    notes = [*said, *(printable(n) for n in notes)]
    if old:
        notes.append(noise.describe())
    notes += own_gpu_note(comparisons) + gpu_notes(comparisons)
    lines = terminal_lines(comparisons, name, notes, width)
    failing = regressions(comparisons, fail_on)
    failed = f"failed: {counts(failing)} (--attn-fail-on={','.join(v.lower() for v in fail_on)})"
    if old and not matched(comparisons):
        return _nothing_compared(old, new, name, fp.key, named, selection, Outcome("pass", lines, comparisons, notes),
                                 failed if failing else "")
    if failing:
        return Outcome("fail", [*lines, failed], comparisons, notes)
    return Outcome("pass", lines, comparisons, notes)


def _nothing_compared(old: dict[str, Bench], new: dict[str, Bench], name: str, key: str, named: bool,
                      selection: Selection | None, outcome: Outcome, failed: str) -> Outcome:
    """A run that shares no case with its baseline: it fails where the baseline was named, or where it selected
    a test file the baseline holds cases of (naming what differs, and what to do); else -- another suite
    entirely -- it is not gated, and says so first."""
    nothing = (f"no case of this run is in the baseline {name} ({len(old)} cases there, {len(new)} here): nothing"
               " was compared")
    files = shared_files(old, new, selection)
    if named or files:
        held = counted_files(old)
        why = [f"this run selected {', '.join(f'{printable(f)} ({held[f]} cases there)' for f in files)}"] if files \
            else []
        differs = what_differs(old, new, selection)
        if differs:
            why.append(f"the baseline holds {'; '.join(d for d, _ in differs)}, which this run did not select")
        missing = sum(c.verdict == "MISSING" for c in outcome.comparisons)
        if missing:
            why.append(f"the {missing} case(s) of it that this run selected were not measured (MISSING, above)")
        said = "; ".join(why)
        flags = " ".join(f for _, f in differs if f)
        line = (f"error: {nothing}. {said[:1].upper() + said[1:]}{'. ' if said else ''}Run the baseline's"
                f" selection{f' ({flags})' if flags else ''}; or run without a gate (--attn-baseline=off); or record"
                " a baseline for this selection (--attn-save-baseline --attn-baselines-dir=DIR, then gate with"
                f" --attn-baseline=DIR/{key}/baseline.json)")
        return dataclasses.replace(outcome, status="fail", lines=[*outcome.lines, line, *([failed] if failed else [])])
    if failed:  # (--attn-fail-on=unselected: the baseline's cases not in this run fail it)
        return dataclasses.replace(outcome, status="fail", lines=[*outcome.lines, failed])
    mine = counted_files(selection.names if selection is not None else new)
    return dataclasses.replace(outcome, lines=[
        f"NOT GATED: {nothing}. The baseline holds cases of {', '.join(printable(f) for f in counted_files(old))};"
        f" this run selected none of those test files (it ran {', '.join(printable(f) for f in mine) or 'none'}):"
        " another suite, which this baseline does not gate, so the exit status is the tests' own. To gate it,"
        " record a baseline of its own (--attn-save-baseline --attn-baselines-dir=DIR) and gate with"
        f" --attn-baseline=DIR/{key}/baseline.json"])
