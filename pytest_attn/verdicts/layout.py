"""Text that fits a terminal: tables whose columns that say nothing (``n/a`` on every row) are left out and whose
least needed columns go when the table is wider than the terminal, rows of a long first cell on two lines, and
prose wrapped; and text read from a file printed as text (:func:`printable`), never as terminal control. Pure; the
width is the caller's (the terminal's, e.g. 120)."""

from __future__ import annotations

import re
import textwrap
from collections.abc import Sequence

EMPTY = ("n/a", "-", "unknown", "")

#: What a terminal would act on rather than show: C0 and C1 controls (escape sequences, a newline, a carriage
#: return), DEL, and the invisible format characters that reorder or hide text (bidirectional overrides,
#: zero-width spaces), line and paragraph separators.
_CONTROL = re.compile("[\x00-\x1f\x7f-\x9f\u00ad\u061c\u180e\u200b-\u200f\u2028-\u202e\u2060-\u206f"
                      "\ufeff\ufff9-\ufffb]")


def printable(text: str) -> str:
    """``text`` (a case name, a device or a reason read from a file) with every control character written as its
    escape (``\\x1b``, ``\\n``, ``\\u202e``): a name can then print neither a colour, a cleared screen, nor a
    line of its own (a fake ``SLOWER`` row)."""
    return _CONTROL.sub(lambda m: m[0].encode("unicode_escape").decode("ascii"), text)


def _render(rows: Sequence[Sequence[str]], indent: str) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(len(rows[0]))]
    return [indent + "  ".join(c.ljust(w) if i == 0 else c.rjust(w) for i, (c, w) in
                               enumerate(zip(r, widths, strict=True))).rstrip() for r in rows]


def fit_table(rows: Sequence[Sequence[str]], width: int | None, drop_order: Sequence[str] = (),
              indent: str = "  ") -> tuple[list[str], list[str]]:
    """(lines, the columns left out for width). ``rows[0]`` is the header. Columns whose every cell is empty
    (:data:`EMPTY`) go first, unreported; then, while the table is wider than ``width``, the columns of
    ``drop_order`` in turn; if it is still too wide, each row's first cell gets a line of its own."""
    header = list(rows[0])
    keep = [i for i in range(len(header)) if i == 0 or any(r[i] not in EMPTY for r in rows[1:])]
    dropped: list[str] = []

    def table(cols: list[int]) -> list[str]:
        return _render([[r[i] for i in cols] for r in rows], indent)

    lines = table(keep)
    for name in drop_order:
        if width is None or max(map(len, lines)) <= width:
            break
        if name in header and header.index(name) in keep:
            keep.remove(header.index(name))
            dropped.append(name)
            lines = table(keep)
    if width is not None and max(map(len, lines)) > width and len(keep) > 1:
        rest = _render([[r[i] for i in keep[1:]] for r in rows], indent + "    ")
        lines = [line for r, tail in zip(rows, rest, strict=True) for line in (indent + r[keep[0]], tail)]
    return lines, dropped


def wrap(lines: Sequence[str], width: int | None) -> list[str]:
    """Each line longer than ``width`` wrapped at words, its continuation indented two more spaces than it."""
    if width is None:
        return list(lines)
    out: list[str] = []
    for line in lines:
        if len(line) <= width:
            out.append(line)
            continue
        lead = line[: len(line) - len(line.lstrip())]
        out += textwrap.wrap(line.strip(), width=width, initial_indent=lead, subsequent_indent=lead + "  ",
                             break_long_words=False, break_on_hyphens=False) or [line]
    return out
