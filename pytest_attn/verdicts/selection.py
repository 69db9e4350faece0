"""What a run selected, against what its baseline holds. Pure.

A case of the baseline that this run did not measure is **MISSING** where the run selected it -- collected it:
its test file run, its back end among the selected ones, not left out by ``-k`` -- and then skipped it (its
library unavailable, the back end refuses it here), or it failed or errored: that fails the gate by default, with
why. It is **UNSELECTED** where the run did not select it (another test file, ``-k``, a back end not selected):
reported, not compared, not failed. Where the run's selection is not known (``pytest-attn merge``: shards do not
record what they selected) every such case is UNSELECTED, as every one was MISSING before the two were told apart
(neither failed by default), and a note says so.

A run that compared nothing, though it selected a test file the baseline holds cases of, is a wrong selection:
:func:`what_differs` names the back ends, dtypes and profile the baseline holds that this run did not select.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from functools import cache

from ..core.catalog import KINDS, PROFILES, profile_variants
from .layout import printable
from .rule import Comparison
from .runs import Bench
from .verdict import ORDER, Verdict


@dataclass(frozen=True)
class Selection:
    """What a run selected: the node ids it collected (after ``-k``, ``--attn-shard`` and the like), why each of
    them that recorded no result did not (a skip's reason, a failure's first line), and the choices that made
    the selection, for the message of a run that compared nothing."""

    names: frozenset[str]
    not_measured: Mapping[str, str] = field(default_factory=dict)
    backends: tuple[str, ...] = ()  # the back ends it selected (--attn-backends, resolved)
    dtypes: tuple[str, ...] = ()  # --attn-dtypes (none: the profile's)
    profile: str = ""


#: The advice beside MISSING cases, once.
MISSING_ADVICE = ("MISSING: a case of the baseline this run selected and did not measure fails the run (why beside"
                  " it): a back end the baseline holds and this run cannot run is a failure, not a pass. Fix what"
                  " stopped it; or leave it out of the selection (--attn-backends, -k), which makes it UNSELECTED;"
                  " or gate without it: --attn-fail-on=slower,timer")
NOT_MEASURED = "selected by this run, and it recorded no result (did the run stop before it?)"


def file_of(name: str) -> str:
    """The test file of a benchmark's name (a pytest node id): ``suites/test_prefill.py``."""
    return name.split("::", 1)[0]


def split_missing(comparisons: Sequence[Comparison],
                  selection: Selection | None) -> tuple[list[Comparison], list[str]]:
    """``comparisons`` with each MISSING case (only in the baseline) told apart: MISSING where ``selection``
    holds it (the note says why it recorded no result), else UNSELECTED; and the notes for the run (the advice
    once, or that the selection is not known). Failing kinds first, as :func:`~.rule.compare` sorts them."""
    out, missing, unknown = [], 0, 0
    for c in comparisons:
        if c.verdict != Verdict.MISSING:
            out.append(c)
        elif selection is not None and c.name in selection.names:
            why = selection.not_measured.get(c.name) or NOT_MEASURED
            out.append(dataclasses.replace(c, notes=(*c.notes, f"not measured: {printable(why)}")))
            missing += 1
        else:
            out.append(dataclasses.replace(c, verdict=Verdict.UNSELECTED))
            unknown += selection is None
    notes = [MISSING_ADVICE] if missing else []
    if unknown:
        notes.append(f"this run's selection is not known (shards' JSON does not record what each selected): the"
                     f" {unknown} case(s) of the baseline not in it are UNSELECTED, not failed (add unselected to"
                     " --fail-on to fail on them)")
    return sorted(out, key=lambda x: (ORDER.index(x.verdict), x.name)), notes


def counted_files(names: Iterable[str]) -> dict[str, int]:
    """How many of ``names`` each test file holds, in the order first met."""
    out: dict[str, int] = {}
    for name in names:
        out[file_of(name)] = out.get(file_of(name), 0) + 1
    return out


def shared_files(old: Mapping[str, Bench], new: Mapping[str, Bench], selection: Selection | None) -> list[str]:
    """The test files this run selected (where its selection is not known: measured) that the baseline holds
    cases of."""
    mine = {file_of(n) for n in (selection.names if selection is not None else new)}
    return [f for f in counted_files(old) if f in mine]


@cache
def _profile_shapes(profile: str) -> frozenset[str]:
    return frozenset(v.shape.name for kind in KINDS for v in profile_variants(profile, kind))


@cache
def _profile_dtypes(profile: str) -> tuple[str, ...]:
    return tuple(sorted({v.dtype for kind in KINDS for v in profile_variants(profile, kind)}))


def _listed(values: Iterable[str], shown: int = 6) -> str:
    items = sorted(set(values))
    more = f" and {len(items) - shown} more" if len(items) > shown else ""
    return ", ".join(printable(v) for v in items[:shown]) + more


def what_differs(old: Mapping[str, Bench], new: Mapping[str, Bench],
                 selection: Selection | None) -> list[tuple[str, str]]:
    """What the baseline ``old`` holds that this run did not select -- back ends, dtypes, the profile its problems
    are of -- each said with this run's choice beside it, and the flag that selects the baseline's."""
    cases = [b.record.case for b in old.values() if b.record is not None]
    mine = [b.record.case for b in new.values() if b.record is not None]
    chosen = selection or Selection(frozenset(new))
    out = []
    backends = chosen.backends or tuple({c.backend for c in mine})
    theirs = {c.backend for c in cases}
    if theirs - set(backends):
        out.append((f"back ends {_listed(theirs - set(backends))} (this run selected {_listed(backends) or 'none'})",
                    f"--attn-backends={','.join(sorted(theirs))}"))
    dtypes = chosen.dtypes or (_profile_dtypes(chosen.profile) if chosen.profile in PROFILES else
                               tuple({c.dtype for c in mine}))
    theirs = {c.dtype for c in cases}
    if theirs - set(dtypes):
        out.append((f"dtypes {_listed(theirs - set(dtypes))} (this run: {_listed(dtypes) or 'none'})",
                    f"--attn-dtypes={','.join(sorted(theirs))}"))
    shapes = {c.shape for c in cases}
    if chosen.profile in PROFILES and not shapes <= _profile_shapes(chosen.profile):
        holding = [p for p in PROFILES if shapes <= _profile_shapes(p)]
        of = f"of --attn-profile={' or '.join(holding)}" if holding else "of no one profile (--attn-case?)"
        out.append((f"problems {of} ({_listed(shapes, 4)}; this run's profile is {chosen.profile})",
                    f"--attn-profile={holding[0]}" if holding else ""))
    return out
