"""A run's journal: each measured case kept on disk as it ends, so a process that dies -- a segfault, ``abort()`` in
a kernel library, the OOM killer, SIGKILL -- loses none of what it had measured.

One file per run, ``<root>/.pytest-attn/journals/<host>-<pid>-<random>.jsonl``: JSON lines, the first a
:class:`Header` (who wrote it, when, how many cases were selected, the run's machine and commit info), then one line
per case -- the benchmark as pytest-benchmark's JSON holds it -- written with one ``write``, flushed and fsynced
before the next case starts. The file is created exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``: a name planted
there is never opened) and the writing process holds an exclusive ``flock`` on it for its life, which the kernel
drops when the process dies however it dies: a journal whose lock can be taken is an orphan. A run that ends (its
end done, interrupted or not) removes its journal. :func:`recovered_run` turns an orphan into pytest-benchmark JSON
marked partial ("the process died"). The codec (:func:`header_line`, :func:`case_line`, :func:`decode`,
:func:`recovered_run`) is pure; :class:`JournalWriter`, :func:`is_orphan` and :func:`orphans` touch the disk.
"""

from __future__ import annotations

import contextlib
import json
import os
import secrets
import socket
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .files import NO_FOLLOW, InputError

try:  # POSIX; elsewhere no journal is ever called an orphan (its owner cannot be told gone)
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None  # type: ignore[assignment]

FORMAT = "pytest-attn journal 1"
FOLDER = Path(".pytest-attn") / "journals"
SUFFIX = ".jsonl"
#: What a recovered run's ``attn_partial`` says happened.
DIED = "the process died"


def journal_folder(root: Path) -> Path:
    """Where a run started in the project at ``root`` keeps its journal (beside pytest-benchmark's ``.benchmarks``)."""
    return root / FOLDER


@dataclass(frozen=True)
class Header:
    """The first line of a journal: the run that writes it."""

    host: str
    pid: int
    started: str  # ISO 8601, UTC
    cases_selected: int | None = None
    machine_info: dict[str, Any] = field(default_factory=dict)
    commit_info: dict[str, Any] = field(default_factory=dict)
    version: str = ""  # pytest-benchmark's, as its JSON records it

    def to_json(self) -> dict[str, Any]:
        return {"format": FORMAT, **asdict(self)}

    @classmethod
    def from_json(cls, data: Any, where: str) -> Header:
        if not isinstance(data, dict) or data.get("format") != FORMAT:
            raise InputError(f"{where} is not a pytest-attn journal (its first line is not a {FORMAT!r} header)")
        try:
            return cls(str(data["host"]), int(data["pid"]), str(data["started"]),
                       None if data.get("cases_selected") is None else int(data["cases_selected"]),
                       dict(data.get("machine_info") or {}), dict(data.get("commit_info") or {}),
                       str(data.get("version") or ""))
        except (KeyError, TypeError, ValueError) as exc:
            raise InputError(f"{where}: its header is unreadable ({type(exc).__name__}: {exc})") from None


@dataclass(frozen=True)
class Journal:
    """A journal read back: its header, the benchmarks it kept, and whether its last line was cut short (the
    process died while writing it: that case is lost, the ones before it are whole)."""

    header: Header
    benchmarks: tuple[dict[str, Any], ...]
    torn: bool = False


def header_line(header: Header) -> str:
    return json.dumps(header.to_json(), sort_keys=True, allow_nan=False) + "\n"


def case_line(benchmark: Mapping[str, Any]) -> str:
    """One case: the benchmark as pytest-benchmark's JSON holds it (its record in ``extra_info``), on one line."""
    return json.dumps({"benchmark": dict(benchmark)}, sort_keys=True, allow_nan=False) + "\n"


def decode(text: str, where: str) -> Journal:
    """A journal's text read back; :class:`InputError` for one that is not a journal, or one damaged before its
    last line. A last line without its newline, or not JSON, is the case the process died writing: left out."""
    lines = text.split("\n")
    torn = lines[-1] != "" and not _whole_case(lines[-1])  # a line is whole once its newline is written
    lines = lines[:-1] if lines[-1] == "" or torn else lines
    if not lines:
        raise InputError(f"{where} is empty: the run died before it kept anything (nothing to recover; remove it)")
    header = Header.from_json(_json(lines[0], where, 1), where)
    benchmarks = []
    for number, line in enumerate(lines[1:], 2):
        entry = _json(line, where, number)
        if not isinstance(entry, dict) or not isinstance(entry.get("benchmark"), dict):
            raise InputError(f"{where}: line {number} is not a kept case")
        benchmarks.append(entry["benchmark"])
    return Journal(header, tuple(benchmarks), torn)


def _whole_case(line: str) -> bool:
    try:
        return isinstance(json.loads(line).get("benchmark"), dict)
    except (ValueError, AttributeError):
        return False


def _json(line: str, where: str, number: int) -> Any:
    try:
        return json.loads(line)
    except ValueError as exc:
        raise InputError(f"{where}: line {number} is not JSON ({exc}); the journal was damaged") from None


def recovered_run(journal: Journal) -> dict[str, Any]:
    """The journal as pytest-benchmark's JSON, marked partial: ``attn_partial`` says the process died and how many
    cases were measured (of how many selected). ``pytest-attn merge`` and ``--attn-baseline`` read it as a run."""
    h = journal.header
    return {
        "machine_info": h.machine_info, "commit_info": h.commit_info, "benchmarks": list(journal.benchmarks),
        "datetime": h.started, "version": h.version,
        "attn_partial": {"reason": f"{DIED} (pid {h.pid} on {h.host}, started {h.started})",
                         "cases_measured": len(journal.benchmarks), "cases_selected": h.cases_selected},
    }


class JournalWriter:
    """The journal of this process's run: created at :meth:`open`, a case per :meth:`keep`, removed by :meth:`close`."""

    def __init__(self, path: Path, fd: int) -> None:
        self.path, self._fd = path, fd
        self.kept = 0

    @classmethod
    def open(cls, folder: Path, header: Header) -> JournalWriter:
        """A new journal in ``folder`` (made where missing), locked and its header on disk; raises OSError."""
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / f"{_safe(header.host)}-{header.pid}-{secrets.token_hex(4)}{SUFFIX}"
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_APPEND | NO_FOLLOW | getattr(os, "O_CLOEXEC", 0)
        fd = os.open(path, flags, 0o644)
        writer = cls(path, fd)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            writer._write(header_line(header))
        except BaseException:
            writer.close()
            raise
        return writer

    def keep(self, benchmark: Mapping[str, Any]) -> None:
        """One measured case, on disk before this returns; raises OSError (a full disk)."""
        self._write(case_line(benchmark))
        self.kept += 1

    def _write(self, text: str) -> None:
        data = text.encode("utf-8")
        while data:
            data = data[os.write(self._fd, data):]
        os.fsync(self._fd)

    def close(self, remove: bool = True) -> None:
        """Release it, and (``remove``) delete it: the run ended, and what it measured is saved elsewhere."""
        if self._fd < 0:
            return
        if remove:
            with contextlib.suppress(OSError):
                self.path.unlink()
            if self.path.parent.match(str(FOLDER)):  # .pytest-attn/journals, where it is empty now
                for folder in (self.path.parent, self.path.parent.parent):
                    with contextlib.suppress(OSError):
                        folder.rmdir()
        with contextlib.suppress(OSError):
            os.close(self._fd)  # (the lock goes with it)
        self._fd = -1


def _safe(name: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "-" for c in name)[:64] or "host"


def this_host() -> str:
    return socket.gethostname()


def held(path: Path) -> bool:
    """Whether a running process holds the journal at ``path`` (its lock cannot be taken). False where that cannot
    be told (no ``flock``) or the file cannot be opened."""
    if fcntl is None:
        return False
    try:
        fd = os.open(path, os.O_RDONLY | NO_FOLLOW)
    except OSError:
        return False
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        return True
    finally:
        os.close(fd)
    return False


def is_orphan(path: Path) -> bool:
    """Whether the process that wrote the journal at ``path`` is gone: it opens, and its lock can be taken. Never
    said on a system without ``flock`` (its owner cannot be told gone)."""
    return fcntl is not None and path.is_file() and not path.is_symlink() and not held(path)


def orphans(folder: Path) -> list[Path]:
    """The orphaned journals in ``folder``, oldest first."""
    if not folder.is_dir():
        return []
    found = [p for p in folder.glob(f"*{SUFFIX}") if is_orphan(p)]
    return sorted(found, key=lambda p: (p.stat().st_mtime, p.name))


def read_journal(path: Path) -> Journal:
    """The journal at ``path``, read and decoded; :class:`InputError` naming it when it cannot be."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"journal {path} cannot be read: {exc.strerror or exc}") from None
    return decode(raw.decode("utf-8", errors="replace"), f"journal {path}")
