"""The front door and the references: the README stays a page for users (short, narrow, no lab log), every link
between the Markdown files lands on a file and a heading that exist, and every module, function or file the code,
the docs and the README name exists -- a reference that names a module that moved is caught here, not by a reader.

Pure reading of files and imports of ``pytest_attn``'s own modules: no subprocess, nothing written."""

from __future__ import annotations

import importlib
import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
#: The Markdown a reader follows: the README, the docs, the baselines' notes and the changelog.
MARKDOWN = sorted([README, ROOT / "CHANGELOG.md", ROOT / "baselines" / "README.md", *(ROOT / "docs").glob("*.md")])
#: Where dated figures may stand: the evidence, and the changelog's release dates.
HISTORY = (ROOT / "docs" / "gpu-validation.md", ROOT / "CHANGELOG.md")
SOURCES = sorted((ROOT / "pytest_attn").rglob("*.py"))
#: Names that look like references but are not meant to resolve in this checkout, with why.
NOT_HERE = {
    "pytest_attn.engine.arm": "where an arm from before engine/ab/ keeps its worker (engine/ab/processes.py BOOT)",
}
DATE = re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b")
COMMIT = re.compile(r"(?<![\w/.#-])(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}(?![\w/.-])")


def slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped (hyphens and underscores kept), spaces to
    hyphens."""
    text = re.sub(r"`|\*\*|\[([^]]*)\]\([^)]*\)", r"\1", heading.strip()).lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    text = re.sub(r"(?ms)^```.*?^```", "", path.read_text())
    return {slug(h) for h in re.findall(r"(?m)^#{1,6} (.+)$", text)}


def links(path: Path) -> list[str]:
    """The relative link targets of a Markdown file: inline ``[text](target)`` and reference definitions."""
    text = re.sub(r"(?ms)^```.*?^```", "", path.read_text())
    found = re.findall(r"\]\(([^)\s]+)\)", text) + re.findall(r"(?m)^\[[^]]+\]: (\S+)", text)
    return [t for t in found if not re.match(r"[a-z]+:", t)]


def test_the_readme_is_a_front_door_not_a_lab_log():
    lines = README.read_text().splitlines()
    assert len(lines) <= 250, f"README.md has {len(lines)} lines; at most 250 (move detail to docs/)"
    wide = [f"{i}: {len(line)}" for i, line in enumerate(lines, 1) if len(line) > 120]
    assert not wide, f"README.md lines over 120 characters: {wide}"
    text = README.read_text()
    assert not DATE.findall(text), "a dated figure belongs in docs/gpu-validation.md, not the README"
    assert not COMMIT.findall(text), "a commit hash belongs in docs/gpu-validation.md or the changelog"


def test_the_date_and_commit_patterns_find_what_they_are_for():
    assert DATE.findall("on an H100 (2026-11-26)") == ["2026-11-26"]
    assert COMMIT.findall("At ef3f3ba 1 SLOWER; da457be; 1,398 cases; a decade; 0.625") == ["ef3f3ba", "da457be"]
    assert not COMMIT.findall("docs/gpu-validation.md#the-paired-ab 1000000 deadbeef")


def test_the_reference_docs_leave_dated_runs_to_the_evidence():
    dated = {p.name: DATE.findall(p.read_text()) for p in MARKDOWN if p not in HISTORY}
    assert not {k: v for k, v in dated.items() if v}, "dated runs go in docs/gpu-validation.md"


@pytest.mark.parametrize("path", MARKDOWN, ids=[str(p.relative_to(ROOT)) for p in MARKDOWN])
def test_every_link_lands_on_a_file_and_a_heading(path):
    broken = []
    for target in links(path):
        file, _, anchor = target.partition("#")
        dest = (path.parent / file).resolve() if file else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.relative_to(ROOT)}")
    assert not broken, f"{path.relative_to(ROOT)}: " + "; ".join(broken)


def test_the_slug_is_githubs():
    assert slug("The paired A/B") == "the-paired-ab"
    assert slug("Is the figure believable? Clocks, throttling, ceilings, HBM") == \
        "is-the-figure-believable-clocks-throttling-ceilings-hbm"
    assert slug("2026-11-26, H100 (da457be): the A/A") == "2026-11-26-h100-da457be-the-aa"


def _resolves(name: str) -> bool:
    parts = name.split(".")
    if parts[-1] == "__main__":  # ``python -m``'s entry: found, not run
        return importlib.util.find_spec(name) is not None
    for i in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:i]))
        except ImportError:
            continue
        for attr in parts[i:]:
            if not hasattr(obj, attr):
                return False
            obj = getattr(obj, attr)
        return True
    return False


def _module_name(path: Path) -> str:
    rel = path.relative_to(ROOT).with_suffix("")
    return ".".join(rel.parts[:-1] if rel.name == "__init__" else rel.parts)


def _relative_candidates(module: str, name: str) -> list[str]:
    """Where Sphinx would look for ``.name`` (or a bare ``name``) written in ``module``: the module, then each
    package above it."""
    name = name.lstrip(".")
    parts = module.split(".")
    return [".".join([*parts[:i], name]) for i in range(len(parts), 0, -1)]


def references() -> list[tuple[str, str, list[str]]]:
    """(where, as written, the names it may mean) for every ``pytest_attn.x.y`` and every Sphinx role naming
    something of pytest_attn, in the package's sources and the Markdown a reader follows."""
    out = []
    for path in [*SOURCES, *(p for p in MARKDOWN if p not in HISTORY)]:
        text = path.read_text()
        where = str(path.relative_to(ROOT))
        for m in re.finditer(r"(?<![\w/.])pytest_attn(?:\.\w+)+", text):
            out.append((where, m[0], [m[0]]))
        if path.suffix != ".py":
            continue
        module = _module_name(path)
        for m in re.finditer(r":(?:mod|func|class|meth|data|attr|exc):`~?([\w.]+)`", text):
            name = m[1]
            if name.startswith("pytest_attn."):
                continue  # checked above
            if "." in name:  # a bare name may be a method of the class at hand: Sphinx's business, not ours
                out.append((where, m[0], _relative_candidates(module, name)))
    return out


def test_every_module_and_function_named_exists():
    refs = references()
    assert len(refs) > 100  # the scan found the references it is for
    broken = sorted({f"{where}: {written}" for where, written, names in refs
                     if not any(n in NOT_HERE or _resolves(n) for n in names)})
    assert not broken, "references to what does not exist (moved?):\n" + "\n".join(broken)


def test_a_moved_module_is_caught():
    assert not _resolves("pytest_attn.engine.pairing")  # moved to engine/ab/
    assert _resolves("pytest_attn.engine.ab.pairing.PairRule.undecided_cap")
    assert _relative_candidates("pytest_attn.verdicts.ab.paired", ".gate.CLOCK_STEP")[-1] == \
        "pytest_attn.gate.CLOCK_STEP"


def test_every_file_of_this_repository_named_exists():
    """Paths such as ``pytest_attn/engine/measure.py``, ``verdicts/rule.py`` or ``scripts/ab_places.py`` in the
    sources, the README and the reference docs (the evidence may name files that are gone)."""
    pattern = re.compile(r"(?<![\w/.-])((?:pytest_attn|scripts|tests|suites|docs|examples|baselines|\.ci|\.github"
                         r"|core|oracle|backends|engine|fuzz|verdicts|plugin)/[\w./-]*\w)(?![{\w])")
    missing = []
    for path in [*SOURCES, *(p for p in MARKDOWN if p not in HISTORY)]:
        for m in pattern.finditer(path.read_text()):
            found = m[1]
            if not any((base / found).exists() for base in (ROOT, ROOT / "pytest_attn", path.parent)):
                missing.append(f"{path.relative_to(ROOT)}: {found}")
    assert not missing, "files named that do not exist:\n" + "\n".join(sorted(set(missing)))
