"""The guard that fails ``pytest tests/`` when a test wrote into the checkout (tests/checkout_guard.py): on a
git repository of its own, what it sees -- a new autosave inside a folder that was ignored already, a tracked
file changed again -- and what it leaves to the command that ran the tests (pytest's cache, bytecode)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest
from checkout_guard import CheckoutGuard, changes, snapshot

pytestmark = pytest.mark.skipif(shutil.which("git") is None, reason="needs git, to read the checkout's state")


def _repo(path: Path) -> Path:
    def git(*args: str) -> None:
        subprocess.run(["git", "-C", str(path), *args], check=True, capture_output=True)

    git("init", "-q")
    (path / ".gitignore").write_text(".benchmarks/\n.pytest_cache/\n__pycache__/\n")
    (path / "README.md").write_text("a checkout\n")
    git("add", ".")
    git("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    (path / ".benchmarks" / "Linux-CPython").mkdir(parents=True)
    (path / ".benchmarks" / "Linux-CPython" / "0001_mine.json").write_text("{}")  # the user's own run
    (path / "README.md").write_text("a checkout, being edited\n")  # changed before the tests ran
    return path


def test_the_guard_sees_a_new_file_in_an_ignored_folder_and_a_changed_file_changed_again(tmp_path):
    repo = _repo(tmp_path)
    before = snapshot(repo)
    assert before is not None and ".benchmarks/Linux-CPython/0001_mine.json" in before
    (repo / ".benchmarks" / "Linux-CPython" / "0002_tests.json").write_text("{}")
    (repo / "README.md").write_text("a checkout, being edited, and written by a test\n")
    (repo / "report").mkdir()
    (repo / "report" / "summary.md").write_text("x")
    (repo / ".pytest_cache").mkdir()
    (repo / ".pytest_cache" / "lastfailed").write_text("{}")
    (repo / "__pycache__").mkdir()
    (repo / "__pycache__" / "m.cpython-311.pyc").write_bytes(b"")
    assert changes(before, snapshot(repo)) == ["new      .benchmarks/Linux-CPython/0002_tests.json",
                                               "changed  README.md", "new      report/summary.md"]
    (repo / ".benchmarks" / "Linux-CPython" / "0001_mine.json").unlink()
    assert "removed  .benchmarks/Linux-CPython/0001_mine.json" in changes(before, snapshot(repo))


def test_a_folder_that_is_not_a_checkout_has_no_snapshot(tmp_path):
    assert snapshot(tmp_path / "nowhere") is None


GUARDED = """
import os
from pathlib import Path


def test_writes_into_the_checkout():
    if os.environ.get("WRITE_INTO"):
        (Path(os.environ["WRITE_INTO"]) / ".benchmarks" / "0002.json").write_text("{}")
"""


def test_a_run_that_wrote_into_the_checkout_fails_naming_the_file(pytester, monkeypatch):
    repo = _repo(pytester.mkdir("checkout"))
    pytester.makepyfile(test_guarded=GUARDED)
    clean = pytester.runpytest("-p", "no:cacheprovider", "test_guarded.py", plugins=[CheckoutGuard(repo)])
    assert clean.ret == pytest.ExitCode.OK
    assert "wrote into the checkout" not in clean.stdout.str()
    monkeypatch.setenv("WRITE_INTO", str(repo))
    wrote = pytester.runpytest("-p", "no:cacheprovider", "test_guarded.py", plugins=[CheckoutGuard(repo)])
    assert wrote.ret == pytest.ExitCode.TESTS_FAILED
    wrote.stdout.fnmatch_lines(["*tests wrote into the checkout*", "  new      .benchmarks/0002.json",
                                f"1 file(s) in {repo} changed during this run: a test runs suites, recipes and reports"
                                f" in its tmp_path (tests/README.md)"])
