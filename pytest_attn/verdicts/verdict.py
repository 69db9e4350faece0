"""The gate's and the A/B's verdicts: one closed vocabulary, each word knowing what it means, whether it fails a run
by default and whether ``--attn-fail-on`` may name it. Pure.

A :class:`Verdict` is a ``str`` (``Verdict.SLOWER == "SLOWER"``), so JSON, CSV and Markdown write it as its name
and a report written before the type existed reads back. A new verdict is a member here and the rule that gives it.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


@dataclass(frozen=True)
class Word:
    meaning: str  # what it says about a case, for the legend and --help
    kind: str  # "decided" (both runs measured, the rule decided), "undecided", "uncompared" or "new"
    fails_by_default: bool = False
    failable: bool = True  # --attn-fail-on may name it


class Verdict(str, Enum):
    """In the order a report lists them: the failing kinds first."""

    SLOWER = "SLOWER"
    TIMER = "TIMER"
    MISSING = "MISSING"
    CLOCK = "CLOCK"
    AMBIGUOUS = "AMBIGUOUS"
    FASTER = "FASTER"
    SAME = "SAME"
    NEW = "NEW"
    UNSELECTED = "UNSELECTED"

    def __str__(self) -> str:
        return str(self.value)

    def __format__(self, spec: str) -> str:  # (Python 3.11 formats a mixed-in Enum as "Verdict.SLOWER")
        return format(str(self.value), spec)

    @property
    def word(self) -> Word:
        return WORDS[self]

    @property
    def meaning(self) -> str:
        return self.word.meaning

    @property
    def fails_by_default(self) -> bool:
        return self.word.fails_by_default

    @property
    def failable(self) -> bool:
        return self.word.failable

    @property
    def decided(self) -> bool:
        """Both runs measured the case and the rule decided it (AMBIGUOUS is measured, not decided)."""
        return self.word.kind == "decided"

    @property
    def uncompared(self) -> bool:
        """A case of the baseline that was not compared (timed differently, not measured, not selected)."""
        return self.word.kind == "uncompared"


WORDS: dict[Verdict, Word] = {
    Verdict.SLOWER: Word("moved by the noise column (3 sigma, both runs) and half the threshold or more", "decided",
                         True),
    Verdict.TIMER: Word("the two runs timed it differently: not compared", "uncompared", True),
    Verdict.MISSING: Word("in the baseline and selected here, but not measured (skipped, failed)", "uncompared", True),
    Verdict.CLOCK: Word("slower (faster) in time, not in clock cycles: the GPU's clock moved", "decided"),
    Verdict.AMBIGUOUS: Word("neither SLOWER nor SAME: the noise cannot tell a change of the threshold from none",
                            "undecided"),
    Verdict.FASTER: Word("the mirror image of SLOWER", "decided"),
    Verdict.SAME: Word("a change of the threshold is ruled out", "decided", failable=False),
    Verdict.NEW: Word("not in the baseline", "new", failable=False),
    Verdict.UNSELECTED: Word("in the baseline, not selected by this run (another file, -k, back end or dtype)",
                             "uncompared"),
}

ORDER: tuple[Verdict, ...] = tuple(Verdict)
FAILABLE: tuple[Verdict, ...] = tuple(v for v in Verdict if v.failable)
DEFAULT_FAIL_ON: tuple[Verdict, ...] = tuple(v for v in Verdict if v.fails_by_default)


def parse_fail_on(text: str) -> tuple[Verdict, ...]:
    """``slower,ambiguous`` -> (SLOWER, AMBIGUOUS); each one ``--attn-fail-on`` may name."""
    names = tuple(x.strip().upper() for x in text.split(",") if x.strip())
    allowed = {v.value for v in FAILABLE}
    bad = [n for n in names if n not in allowed]
    if not names or bad:
        raise ValueError(f"{text!r} is not a list of verdicts: give one or more of"
                         f" {', '.join(v.value.lower() for v in FAILABLE)} (e.g. slower,missing)")
    return tuple(Verdict(n) for n in names)


def fail_on_help() -> str:
    """``--attn-fail-on``'s help: the default first, then the others, from the vocabulary."""
    default = ",".join(v.value.lower() for v in DEFAULT_FAIL_ON)
    others = ", ".join(v.value.lower() for v in FAILABLE if not v.fails_by_default)
    return f"verdicts that fail the run: {default} (default), {others}"
