"""Files read and written. :func:`read_json` is the one reader of the JSON files the tool consumes, turning
any malformed one into an :class:`InputError` that names it. :func:`write_atomic` writes a file whole or not
at all: through a temporary file in the same folder, flushed to disk and renamed over the target, so a full
disk, a signal or a crash mid-write leaves the old file or none -- never a truncated one. The file gets the
mode a plain ``open`` would give it (0666 less the umask), not ``mkstemp``'s 0600: others on a shared CI host
can read what the run wrote.

A folder a run writes into is not always one it made: a report folder, the baselines, a shared CI scratch space.
Nothing here writes *through* a symbolic link planted there: :func:`write_atomic` renames its temporary file over
the name (which replaces a link, never writes into its target), and :func:`probe_writable` proves a folder takes a
file with a name of its own, created exclusively (``O_CREAT | O_EXCL | O_NOFOLLOW``)."""

from __future__ import annotations

import codecs
import json
import os
import secrets
import tempfile
from pathlib import Path
from typing import Any


def write_atomic(path: Path, text: str | bytes) -> None:
    """Write ``text`` (str as UTF-8, or bytes) to ``path`` whole or not at all; raises the OSError of a failed
    write, naming ``path`` (the temporary file removed, ``path`` as it was). A symbolic link at ``path`` is
    replaced by the file, its target left as it was."""
    try:
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    except OSError as exc:
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())
        with os.fdopen(fd, "wb") as fh:
            fh.write(text.encode("utf-8") if isinstance(text, str) else text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except OSError as exc:  # a full disk says "No space left on device" without the file: name the target
        Path(tmp).unlink(missing_ok=True)
        raise OSError(exc.errno, exc.strerror, str(path)) from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


#: The start of the name of :func:`probe_writable`'s file (the rest is this process's and random).
PROBE_PREFIX = ".pytest-attn-write-test"
NO_FOLLOW = getattr(os, "O_NOFOLLOW", 0)  # (POSIX; O_EXCL alone refuses a link on Windows too)


def probe_writable(folder: Path) -> None:
    """Prove ``folder`` takes a new file: create one of a name no one else has (this process's id and random
    bits), exclusively and without following a link (``O_CREAT | O_EXCL | O_NOFOLLOW``), then remove it. Raises
    the OSError of a folder that cannot be written. A name planted there beforehand is never opened."""
    probe = folder / f"{PROBE_PREFIX}-{os.getpid()}-{secrets.token_hex(6)}"
    fd = os.open(probe, os.O_WRONLY | os.O_CREAT | os.O_EXCL | NO_FOLLOW, 0o600)
    os.close(fd)
    probe.unlink()


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class InputError(ValueError):
    """A file (or value) a person gave that cannot be used; the message names it and what is wrong, and the
    run or command ends with exit status 4 (pytest's for a usage error)."""


def read_json(path: Path, what: str) -> Any:
    """The JSON document in ``path`` -- the one reader for every file the tool consumes (baselines, shards,
    saved runs) -- or :class:`InputError` saying what the file is instead: unreadable, empty, gzip-compressed, UTF-16
    (as PowerShell's ``>`` writes), not UTF-8, not JSON (with line and column), or holding NaN or Infinity."""
    try:
        raw = path.read_bytes()
    except OSError as exc:
        raise InputError(f"{what} {path} cannot be read: {exc.strerror or exc}") from None
    if not raw.strip():  # a segfaulted run on an H200 left its --benchmark-json so (docs/gpu-validation.md)
        raise InputError(f"{what} {path} is empty: the run that was to write it did not reach its end (pytest-benchmark"
                         " 5.2 and older create the --benchmark-json file at start-up and fill it at the end). If"
                         " that run died, its measured cases are in its journal: pytest-attn recover turns them into"
                         " a run")
    if raw[:2] == b"\x1f\x8b":
        raise InputError(f"{what} {path} is gzip-compressed; decompress it first (gunzip -k {path})")
    if raw[:2] in (codecs.BOM_UTF16_LE, codecs.BOM_UTF16_BE) or (len(raw) > 1 and raw[1:2] == b"\x00"):
        raise InputError(f"{what} {path} is UTF-16 text, not UTF-8 (a Windows redirect writes it so); convert it"
                         f" (iconv -f UTF-16 -t UTF-8 {path}) or write the file again")
    try:
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InputError(f"{what} {path} is not UTF-8 text (byte {exc.start} is {raw[exc.start]:#04x}): is it the"
                         " JSON file pytest-benchmark or pytest-attn wrote?") from None
    try:
        return json.loads(text, parse_constant=_no_constant)
    except json.JSONDecodeError as exc:
        raise InputError(f"{what} {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg});"
                         " was it cut short, or edited by hand?") from None
    except ValueError as exc:
        raise InputError(f"{what} {path}: {exc}") from None


def _no_constant(name: str) -> Any:
    raise ValueError(f"it holds {name}, which is not a JSON number")
