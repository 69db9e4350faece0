"""What the gate's reports (:mod:`.reports`) and the A/B's (:mod:`.ab.summaries`) render alike: the verdicts
counted, a Markdown table with the failing verdicts in bold, the cases explained one per line, CSV text, and
report files written whole. Pure except :func:`write_files`."""

from __future__ import annotations

import csv
import io
import re
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..core.files import write_atomic
from .layout import printable


def verdict_counts(verdicts: Iterable[str], empty: str, *, by_name: bool = False) -> str:
    """"3 SAME, 1 SLOWER": each verdict's count, in the order first met (``by_name``: alphabetical), or ``empty``."""
    found: dict[str, int] = {}
    for v in verdicts:
        found[v] = found.get(v, 0) + 1
    items = sorted(found.items()) if by_name else list(found.items())
    return ", ".join(f"{n} {v}" for v, n in items) or empty


def md_code(text: str) -> str:
    """``text`` (a case name, a path: read from a file) as a Markdown code span it cannot leave: its control
    characters escaped (:func:`~.layout.printable`), fenced by one backtick more than the longest run of them in
    it, and padded where it starts or ends with one. Inside a code span nothing is markup: no bold, no link, no
    HTML."""
    text = printable(text)
    longest = max((len(run) for run in re.findall("`+", text)), default=0)
    fence = "`" * (longest + 1)
    pad = " " if text.startswith("`") or text.endswith("`") or (text.startswith(" ") and text.endswith(" ")) else ""
    return f"{fence}{pad}{text}{pad}{fence}"


def md_cell(text: str) -> str:
    """``text`` as the content of one Markdown table cell: a ``|`` (which ends a cell even inside a code span)
    escaped, and no line break (control characters escaped)."""
    return printable(text).replace("|", "\\|")


def md_text(text: str) -> str:
    """Prose that may hold a name from a file, as one line of Markdown: control characters escaped, and ``<``
    and ``&`` as entities (no raw HTML)."""
    return printable(text).replace("&", "&amp;").replace("<", "&lt;")


def markdown_table(header: Sequence[str], rows: Iterable[tuple[Sequence[str], bool]], verdict_column: int) -> str:
    """A Markdown table; each row's first cell as code (:func:`md_code`), every cell escaped for a table
    (:func:`md_cell`), and its verdict in bold where the row fails the run."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for cells, failing in rows:
        row = [md_code(cells[0]), *(md_text(c) for c in cells[1:])]
        if failing:
            row[verdict_column] = f"**{row[verdict_column]}**"
        out.append("| " + " | ".join(md_cell(c) for c in row) + " |")
    return "\n".join(out) + "\n"


def explained(items: Iterable[tuple[str, str, str]]) -> str:
    """``- `case` VERDICT: why`` per (case, verdict, why), the case a code span and the why one line of text."""
    return "".join(f"- {md_code(name)} {verdict}: {md_text(why)}\n" for name, verdict, why in items)


def csv_rows(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(header)
    writer.writerows(rows)
    return out.getvalue()


def write_files(folder: Path, files: dict[str, str]) -> list[str]:
    """Each file written whole into ``folder`` (made where missing); a "wrote PATH" line per file."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in files.items():
        write_atomic(folder / name, text)
    return [f"wrote {folder / name}" for name in files]
