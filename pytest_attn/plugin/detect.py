"""Is this pytest session an attention run? Decided at configure -- before pytest-benchmark reads its options,
so that the run can be saved for ``--benchmark-compare`` -- from what is known then, cheaply:

* an ``--attn-*`` option was given;
* a conftest or plugin registers back ends (``pytest_attn_register_backends``);
* a test file the run collects takes pytest-attn's fixtures (``attn_bench``, ``attn_kernels``, ``attn_fuzzer``)
  as test arguments: a byte search of the files under the run's paths, and only where it finds one of the names,
  a parse of that file (a name inside a string, as in pytest-attn's own tests, does not count). At most
  :data:`MAX_FILES` files, so a project without attention cases pays next to nothing.

Then the plugin prepares the run itself (:func:`~.session.prepare_attention_run`): a project of one's own needs
no conftest call. Pure but for reading files.
"""

from __future__ import annotations

import ast
import fnmatch
import os
from collections.abc import Iterator, Sequence
from pathlib import Path

FIXTURES = ("attn_bench", "attn_kernels", "attn_fuzzer")
MAX_FILES = 2000
SKIP_DIRS = {".git", ".hg", ".venv", "venv", "node_modules", "__pycache__", ".tox", ".nox", "build", "dist"}


def test_files(paths: Sequence[Path], patterns: Sequence[str]) -> Iterator[Path]:
    """The Python test files under ``paths`` (files as given, folders walked), pytest's ``python_files``
    patterns, hidden and environment folders left out."""
    for path in paths:
        if path.is_file():
            if path.suffix == ".py":
                yield path
            continue
        if not path.is_dir():
            continue
        for folder, dirs, files in os.walk(path):
            dirs[:] = [d for d in dirs if d not in SKIP_DIRS and not d.startswith(".")]
            for name in files:
                if any(fnmatch.fnmatch(name, p) for p in patterns):
                    yield Path(folder) / name


def takes_fixtures(source: bytes) -> bool:
    """A function in ``source`` takes one of :data:`FIXTURES` as an argument (not merely names it)."""
    if not any(name.encode() in source for name in FIXTURES):
        return False
    try:
        tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return False
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            args = [*node.args.posonlyargs, *node.args.args, *node.args.kwonlyargs]
            if any(a.arg in FIXTURES for a in args):
                return True
    return False


def attention_file(paths: Sequence[Path], patterns: Sequence[str]) -> Path | None:
    """The first test file under ``paths`` that takes pytest-attn's fixtures, or None."""
    for i, path in enumerate(test_files(paths, patterns)):
        if i >= MAX_FILES:
            return None
        try:
            source = path.read_bytes()
        except OSError:
            continue
        if takes_fixtures(source):
            return path
    return None
