"""The README's runnable blocks, as tests/test_readme.py and scripts/measure_readme.py read them.

A fenced block is marked by an HTML comment on the line before it (invisible on GitHub):

* ``<!-- file: NAME -->``: a file of the recipes; every ``cpu`` / ``gpu`` block runs in a fresh folder holding
  the files the README declared before it;
* ``<!-- run: cpu -->``: commands that run on any machine, in that fresh folder;
* ``<!-- run: checkout -->``: commands that run in this checkout;
* ``<!-- run: gpu -->``: commands that need a GPU (``scripts/measure_readme.py --gpu`` runs them);
* ``<!-- run: install -->`` / ``<!-- run: ci -->``: what ``.ci/run`` runs itself (the install, the tests);
* ``<!-- run: yours -->``: commands that name your project (a repository, your builds): adapt, then run.

A command's comment says the exit status it ends with: ``exits N`` (exactly N), ``exit N on ...`` (0, or N
where that happens); otherwise 0.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
MARKER = re.compile(r"<!-- (file|run): ([\w.+-]+) -->\n```(\w*)\n(.*?)```", re.S)
KINDS = ("cpu", "checkout", "gpu", "install", "ci", "yours")


@dataclass(frozen=True)
class Command:
    kind: str  # one of KINDS
    line: str  # as the README has it, the comment included
    files: tuple[tuple[str, str], ...]  # (name, text) of the files declared before it
    section: str  # the README heading it stands under

    @property
    def exits(self) -> frozenset[int]:
        comment = self.line.partition("  #")[2]
        exact = re.search(r"\bexits (\d+)", comment)
        if exact:
            return frozenset({int(exact[1])})
        maybe = re.search(r"\bexit (\d+) on\b", comment)
        return frozenset({0, int(maybe[1])}) if maybe else frozenset({0})


def commands(text: str | None = None) -> list[Command]:
    """Every command of a marked block, in the README's order."""
    text = README.read_text() if text is None else text
    files: dict[str, str] = {}
    out: list[Command] = []
    for match in MARKER.finditer(text):
        what, name, _, body = match.groups()
        if what == "file":
            files[name] = body
            continue
        if name not in KINDS:
            raise ValueError(f"README: unknown block kind {name!r} (give one of {', '.join(KINDS)})")
        heading = re.findall(r"(?m)^## (.*)$", text[: match.start()])
        for line in body.splitlines():
            if line.strip() and not line.lstrip().startswith("#"):
                out.append(Command(name, line, tuple(files.items()), heading[-1] if heading else ""))
    return out


def unmarked_blocks(text: str | None = None) -> list[str]:
    """Shell blocks that carry no marker: commands a reader may run that nothing runs."""
    text = README.read_text() if text is None else text
    blocks = re.finditer(r"(?m)^```(bash|sh|shell)\n", text)
    return [text[b.start(): b.start() + 80] for b in blocks
            if not re.search(r"<!-- (file|run): [\w.+-]+ -->\n$", text[: b.start()])]
