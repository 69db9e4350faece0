"""What the gate's reports (:mod:`.reports`) and the A/B's (:mod:`.ab.summaries`) render alike: the verdicts
counted, a Markdown table with the failing verdicts in bold, the cases explained one per line, CSV text, and
report files written whole. Pure except :func:`write_files`."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterable, Sequence
from pathlib import Path

from ..core.files import write_atomic


def verdict_counts(verdicts: Iterable[str], empty: str, *, by_name: bool = False) -> str:
    """"3 SAME, 1 SLOWER": each verdict's count, in the order first met (``by_name``: alphabetical), or ``empty``."""
    found: dict[str, int] = {}
    for v in verdicts:
        found[v] = found.get(v, 0) + 1
    items = sorted(found.items()) if by_name else list(found.items())
    return ", ".join(f"{n} {v}" for v, n in items) or empty


def markdown_table(header: Sequence[str], rows: Iterable[tuple[Sequence[str], bool]], verdict_column: int) -> str:
    """A Markdown table; each row's first cell as code, and its verdict in bold where the row fails the run."""
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for cells, failing in rows:
        row = list(cells)
        row[0] = f"`{row[0]}`"
        if failing:
            row[verdict_column] = f"**{row[verdict_column]}**"
        out.append("| " + " | ".join(row) + " |")
    return "\n".join(out) + "\n"


def explained(items: Iterable[tuple[str, str, str]]) -> str:
    """``- `case` VERDICT: why`` per (case, verdict, why)."""
    return "".join(f"- `{name}` {verdict}: {why}\n" for name, verdict, why in items)


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
