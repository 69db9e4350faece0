"""The README's front door, as a newcomer meets it: the quick start and the three task recipes run as written
(the end-to-end tier), the recipes in a fresh folder outside this checkout and the quick start in a copy of it,
and none of them may end having run nothing (the README's decode line once collected ``test_decode[NOTSET]``
and ended "1 skipped"). GPU-only commands are marked and run by ``scripts/measure_readme.py --gpu``; the
install and ``pytest tests/`` are what ``.ci/run`` runs."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from readme_blocks import ROOT, commands, unmarked_blocks

#: What a command's output must not say: it ran nothing, or nothing of what it promised.
EMPTY = ("NOTSET", "no tests ran", "collected 0 items", "measured nothing", "Traceback (most recent call last)")
MAX_LINES = 450
HANG_S = 600  # a guard against a hung command, not a bound on how long one may take


def _env() -> dict[str, str]:
    """This interpreter's environment first on PATH (``pytest`` and ``python`` as the reader's shell finds them
    after the README's install); nothing of this test session's own."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "COLUMNS"))}
    env["PATH"] = os.pathsep.join([os.path.dirname(sys.executable), env.get("PATH", "")])
    return env


def test_the_readme_is_short_and_every_shell_block_is_run_somewhere():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= MAX_LINES
    assert not unmarked_blocks(text), "a shell block without <!-- run: ... --> is run by nothing"
    kinds = {c.kind for c in commands(text)}
    assert {"cpu", "gpu", "checkout", "install", "ci"} <= kinds
    sections = {c.section for c in commands(text) if c.kind == "cpu"}
    assert {"Benchmark my kernel against flash-attn, FA4 and cuDNN", "Gate my pull request",
            "Fuzz my kernel"} <= sections


def test_a_command_says_the_exit_status_it_ends_with():
    from readme_blocks import Command

    assert Command("cpu", "pytest x   # exits 1: the gate turns red", (), "").exits == {1}
    assert Command("cpu", "pytest x   # your branch: exit 1 on a SLOWER", (), "").exits == {0, 1}
    assert Command("cpu", "pytest x   # anywhere", (), "").exits == {0}


def _recipes() -> list[tuple[str, list]]:
    by_section: dict[str, list] = {}
    for c in commands():
        if c.kind in ("cpu", "checkout"):
            by_section.setdefault(c.section, []).append(c)
    return list(by_section.items())


RECIPES = dict(_recipes())


def checkout_copy(dest: Path) -> Path:
    """The checkout's files as git sees them (tracked, and new files not ignored) copied to ``dest``: a checkout
    command runs there, so that its autosave, reports and caches stay out of the user's checkout."""
    listed = subprocess.run(["git", "-C", str(ROOT), "ls-files", "-co", "--exclude-standard", "-z"],
                            capture_output=True, text=True)
    if listed.returncode == 0:
        for name in filter(None, listed.stdout.split("\0")):
            if (ROOT / name).is_file():
                (dest / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, dest / name)
    else:  # not a git checkout (an unpacked sdist): everything but what runs leave behind
        shutil.copytree(ROOT, dest, dirs_exist_ok=True, ignore=shutil.ignore_patterns(
            ".git", ".venv*", "__pycache__", ".benchmarks", ".hypothesis", ".pytest_cache", "reports", ".ficache",
            ".fa4cache", "*.egg-info"))
    return dest


@pytest.mark.e2e
@pytest.mark.parametrize("section", RECIPES)
def test_each_recipe_runs_as_written(section, tmp_path):
    """A recipe's commands, in order, end with the exit status their comment gives and say nothing of having run
    nothing: the ``cpu`` ones in a fresh folder holding the files the README gave up to them, the ``checkout`` ones
    in a copy of this checkout. (One test a recipe, both read from its one run: under pytest-xdist a fixture
    shared by two tests is made again in each worker that runs one.)"""
    folder, copy = tmp_path / "recipe", None
    folder.mkdir()
    for step in RECIPES[section]:
        if step.kind == "checkout":
            copy = copy or checkout_copy(tmp_path / "checkout")
        for name, body in step.files:
            if step.kind == "cpu" and not (folder / name).exists():
                (folder / name).write_text(body)
        cwd = copy if step.kind == "checkout" else folder
        done = subprocess.run(step.line.partition("  #")[0], shell=True, cwd=cwd, env=_env(), capture_output=True,
                              text=True, timeout=HANG_S)
        said = done.stdout + done.stderr
        assert done.returncode in step.exits, f"{step.line}\nexit {done.returncode}\n{said[-3000:]}"
        found = [e for e in EMPTY if e in said]
        assert not found, f"{step.line}: said {found}\n{said[-3000:]}"
