"""What a test run left in the checkout: a snapshot of the files git sees as changed, new or ignored, taken
before and after ``pytest tests/``; :class:`CheckoutGuard` (registered by tests/conftest.py) fails the run on a
difference and names the files.

``git status`` alone cannot see a new file inside a folder that is already untracked or ignored (a second
autosave in ``.benchmarks/``), nor a tracked file changed again: so every file under each entry it lists is
kept with its size and modification time. What the test command itself writes is left out: pytest's own cache
(``.pytest_cache``), Python's bytecode (``__pycache__``) and the kernel caches the checkout's conftest.py keeps
there on purpose (``.ficache``, ``.fa4cache``); so are folders no test run writes into and that are costly to
walk (a virtual environment)."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

#: Written by the command that runs the tests, not by a test: pytest's cache, Python's bytecode, the JIT caches
#: that the checkout's conftest.py points FlashInfer and FA4 at (compiled kernels, kept between runs on purpose).
THE_COMMANDS_OWN = frozenset({".pytest_cache", "__pycache__", ".ficache", ".fa4cache"})
#: Folders not walked: a virtual environment or a package cache, whatever its name.
NOT_WALKED = frozenset({".git", "node_modules", ".mypy_cache", ".ruff_cache"})

UNTRACKED = ("??", "!!")  # git's status of a file it does not track: untracked, ignored
Snapshot = dict[str, tuple[str, int, int]]  # path relative to the checkout -> (git's status, size, mtime in ns)


def git_entries(root: Path) -> list[tuple[str, str]] | None:
    """The paths ``git status`` lists as changed, untracked (``??``) or ignored (``!!``), each with its status
    (folders end in /), or None where ``root`` is not a git checkout or git cannot be run."""
    try:
        done = subprocess.run(["git", "-C", str(root), "status", "--porcelain=v1", "-z", "--ignored=matching",
                               "--untracked-files=normal"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.SubprocessError):
        return None
    if done.returncode != 0:
        return None
    entries, fields = [], iter(done.stdout.split("\0"))
    for field in fields:
        if not field:
            continue
        status, path = field[:2], field[3:]
        if "R" in status or "C" in status:
            next(fields, None)  # a rename's or copy's source follows it
        entries.append((status, path))
    return entries


def _skipped(parts: tuple[str, ...]) -> bool:
    return any(p in THE_COMMANDS_OWN or p in NOT_WALKED or _is_venv(p) for p in parts)


def _is_venv(name: str) -> bool:
    return name in ("venv", "env") or name.startswith(".venv")


def snapshot(root: Path) -> Snapshot | None:
    """Each file under each entry ``git status`` lists, with its size and modification time (None: no git)."""
    entries = git_entries(root)
    if entries is None:
        return None
    files: Snapshot = {}
    for status, entry in entries:
        path = root / entry
        if _skipped(Path(entry).parts):
            continue
        if path.is_dir() and not path.is_symlink():
            for folder, dirs, names in os.walk(path):
                dirs[:] = [d for d in dirs if not _skipped((d,))]
                for name in names:
                    _add(files, root, Path(folder) / name, status)
        else:
            _add(files, root, path, status)
    return files


def _add(files: Snapshot, root: Path, path: Path, status: str) -> None:
    try:
        st = path.lstat()
    except OSError:  # a tracked file deleted: listed by git, not on disk
        files[str(path.relative_to(root))] = (status, -1, -1)
        return
    files[str(path.relative_to(root))] = (status, st.st_size, st.st_mtime_ns)


def changes(before: Snapshot, after: Snapshot) -> list[str]:
    """What differs, one line a file: ``new`` (a file git does not track), ``changed`` (a tracked one, or one
    written again) or ``removed``, then its path."""
    lines = []
    for path in sorted(before.keys() | after.keys()):
        was, now = before.get(path), after.get(path)
        if was == now:
            continue
        if (now is not None and now[1] == -1) or (now is None and was is not None and was[0] in UNTRACKED):
            lines.append(f"removed  {path}")
        elif was is None and now is not None and now[0] in UNTRACKED:
            lines.append(f"new      {path}")
        else:
            lines.append(f"changed  {path}")
    return lines


class CheckoutGuard:
    """A pytest plugin: the checkout's snapshot at the start of the session and at its end; a difference fails
    a run that would otherwise pass (exit status 1) and is listed after the summary. Registered in the process
    that reports the run (pytest-xdist's controller, not its workers)."""

    SHOWN = 20

    def __init__(self, root: Path) -> None:
        self.root = root
        self.before: Snapshot | None = None
        self.wrote: list[str] = []

    def pytest_sessionstart(self, session: pytest.Session) -> None:
        self.before = snapshot(self.root)

    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        after = snapshot(self.root) if self.before is not None else None
        if self.before is None or after is None:
            return
        self.wrote = changes(self.before, after)
        if self.wrote and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        if not self.wrote:
            return
        terminalreporter.section("tests wrote into the checkout", sep="!", red=True, bold=True)
        for line in self.wrote[: self.SHOWN]:
            terminalreporter.write_line(f"  {line}")
        more = f" (and {len(self.wrote) - self.SHOWN} more)" if len(self.wrote) > self.SHOWN else ""
        terminalreporter.write_line(f"{len(self.wrote)} file(s) in {self.root} changed during this run{more}: a test"
                                    f" runs suites, recipes and reports in its tmp_path (tests/README.md)", red=True)
