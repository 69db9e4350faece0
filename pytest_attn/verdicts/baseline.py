"""Stored baselines: ``baselines/<device-key>/baseline.json`` in pytest-benchmark's JSON format, with the
run's fingerprint in ``machine_info.attn_fingerprint`` (``nvidia-h200``; ``cpu-<model>`` on a CPU).

Reading and writing both check the run (:func:`check_run`): a ``benchmarks`` list, each with a name and
a finite, positive ``stats.median`` (a JSON ``true`` is not a number here), a readable result record
where one is stored, and a fingerprint that names its device. Saving holds a lock (``filelock``, its file in the
temporary folder: :func:`lock_path`) from reading the old baseline to renaming the new one into place, so two
processes saving at once cannot both pass the overwrite rule: a baseline recorded on another device is not
replaced unless forced, nor is a corrupt one. The write goes through a temporary file and a rename,
so a baseline is either the old one or the new one, never half of each.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import tempfile
from pathlib import Path
from typing import Any

from ..core.files import InputError, read_json, write_atomic
from ..core.record import SCHEMA, VERSION, Record, is_record
from .fingerprint import Fingerprint, differences, repeat_of
from .repeats import add_repeat, refused_note
from .runs import partial_note
from .stored_numbers import legacy_numbers, record_numbers

FILE_NAME = "baseline.json"
#: How to replace an unusable baseline, in words valid wherever the user runs (the plugin names the very command
#: of the run where it knows it).
RERECORD = "re-record it: rerun your benchmark command with --attn-save-baseline --attn-force"
LOCK_TIMEOUT_S = 120.0


class BaselineError(InputError):
    """A baseline that cannot be used; the message names the file and what is wrong."""


def baseline_path(root: Path, key: str) -> Path:
    return root / key / FILE_NAME


def _positive(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value) and value > 0


def check_run(data: Any, where: str, *, empty_ok: bool = False) -> dict[str, Any]:
    """``data`` if it is a run a gate (or a merge) can use; else :class:`BaselineError` saying what is wrong
    and where. Every part is checked for its shape before anything reads it -- a ``timing``, ``machine_info``
    or shard mark of the wrong kind is refused here with its name, never met later as a traceback -- and a case
    stored twice is refused (its later copy would silently win)."""
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise BaselineError(f"{where} has no 'benchmarks' list: it is not pytest-benchmark JSON; {RERECORD}")
    if not data["benchmarks"] and not empty_ok:
        raise BaselineError(f"{where} holds no benchmarks; {RERECORD}")
    seen: dict[str, int] = {}
    for i, bench in enumerate(data["benchmarks"]):
        name = _check_bench(bench, i, where)
        if name in seen:
            raise BaselineError(f"{where}: benchmark {name!r} is stored twice (#{seen[name]} and #{i}); a gate would"
                                f" read one of them silently. Keep one (or {RERECORD})")
        seen[name] = i
    _check_machine_info(data.get("machine_info"), where)
    for key in ("attn_partial", "attn_shard"):
        if key in data and not isinstance(data[key], dict):
            raise BaselineError(f"{where}: {key} is {data[key]!r}, not the mark pytest-attn writes; {RERECORD}")
    shard = data.get("attn_shard")
    if shard is not None and not _shard_mark_ok(shard):
        raise BaselineError(f"{where}: its attn_shard mark {shard!r} is not one --attn-shard=I/N writes (index and"
                            " count whole numbers, 1 <= index <= count): run the shard again")
    return data


def _check_bench(bench: Any, i: int, where: str) -> str:
    """One benchmark's shape: a dict with a name, a finite positive median, and a readable record where it
    holds one; returns its name."""
    name = (bench.get("fullname") or bench.get("name")) if isinstance(bench, dict) else None
    if not isinstance(name, str) or not name:
        raise BaselineError(f"{where}: benchmark #{i} has no name; {RERECORD}")
    stats = bench.get("stats")
    median: Any = stats.get("median") if isinstance(stats, dict) else None
    if not _positive(median):
        raise BaselineError(f"{where}: benchmark {name!r} has stats.median {median!r}, not a finite positive"
                            f" number of seconds; {RERECORD}")
    info = bench.get("extra_info")
    if info is not None and not isinstance(info, dict):
        raise BaselineError(f"{where}: benchmark {name!r} has extra_info {info!r}, not an object; {RERECORD}")
    if isinstance(info, dict) and "schema" in info and not is_record(info):
        raise BaselineError(f"{where}: benchmark {name!r} holds a result record of schema {info['schema']!r} (version"
                            f" {info.get('version')!r}); this pytest-attn reads schema {SCHEMA!r} version {VERSION}:"
                            " written by another program or version of it, it would be read as plain"
                            f" pytest-benchmark figures. Use the pytest-attn that wrote it, or {RERECORD}")
    if is_record(info):
        _check_repeats(info, name, where)
        try:
            Record.from_json(info)
        except Exception as exc:  # a section of the wrong shape fails wherever the decoder meets it
            why = str(exc) if isinstance(exc, ValueError) else f"{type(exc).__name__}: {exc}"
            raise BaselineError(f"{where}: benchmark {name!r} has an unreadable result record ({why}); {RERECORD}")\
                from None
        problem = record_numbers(info, median)  # (a positive number: checked above)
    else:
        problem = legacy_numbers(info or {}, stats)
    if problem:
        raise BaselineError(f"{where}: benchmark {name!r} has {problem}: a verdict read from it would be blind or"
                            f" wrong; {RERECORD}")
    return name


def _check_machine_info(info: Any, where: str) -> None:
    if info is None:
        return
    if not isinstance(info, dict):
        raise BaselineError(f"{where}: machine_info is {info!r}, not an object; {RERECORD}")
    for key in ("attn_device", "attn_fingerprint"):
        if key in info and info[key] is not None and not isinstance(info[key], dict):
            raise BaselineError(f"{where}: machine_info.{key} is {info[key]!r}, not an object; {RERECORD}")
    raw = info.get("attn_fingerprint")
    if raw is not None:
        try:
            Fingerprint.from_dict(raw)
        except Exception as exc:
            raise BaselineError(f"{where}: its fingerprint is unusable ({exc}); {RERECORD}") from None


def _shard_mark_ok(mark: dict[str, Any]) -> bool:
    index, count = mark.get("index"), mark.get("count")
    whole = all(isinstance(v, int) and not isinstance(v, bool) for v in (index, count))
    return whole and 1 <= index <= count  # type: ignore[operator]


#: The per-repeat numbers of a stored case: (section, field, what a value must be)
REPEAT_FIELDS: tuple[tuple[str, str], ...] = (("timing", "repeats_s"), ("clocks", "repeats_sm_clock_mhz"))


def _check_repeats(info: dict[str, Any], name: str, where: str) -> None:
    """Each stored repeat a finite positive number (not ``true``, ``"nan"``, ``"inf"`` or ``-1``, which
    json and Python would otherwise take as 1, a string or a negative time): one bad repeat would turn the
    case's noise band into nonsense and blind the gate to any slowdown."""
    for section, key in REPEAT_FIELDS:
        part = info.get(section)
        values = part.get(key) if isinstance(part, dict) else None
        if values is None:
            continue
        if not isinstance(values, list | tuple):
            raise BaselineError(f"{where}: benchmark {name!r} has {section}.{key} {values!r}, not a list;"
                                f" {RERECORD}")
        for i, value in enumerate(values):
            if not _positive(value):
                raise BaselineError(f"{where}: benchmark {name!r} has {section}.{key}[{i}] = {value!r}, not a"
                                    f" finite positive number; {RERECORD}")


def load_baseline(path: Path) -> dict[str, Any]:
    """The run stored at ``path``, read by the one JSON reader and checked (:func:`check_run`)."""
    try:
        data = read_json(path, "baseline")
    except InputError as exc:
        raise BaselineError(f"{exc}; restore it from git or {RERECORD}") from None
    return check_run(data, f"baseline {path}")


def stored_fingerprint(run: dict[str, Any]) -> Fingerprint | None:
    raw = (run.get("machine_info") or {}).get("attn_fingerprint")
    try:
        return Fingerprint.from_dict(raw) if raw else None
    except (TypeError, ValueError):
        return None


def stored_device(run: dict[str, Any]) -> str | None:
    """The device a run was measured on, for people: from its fingerprint, else its ``attn_device``."""
    fp = stored_fingerprint(run)
    if fp is not None:
        return fp.device
    device = (run.get("machine_info") or {}).get("attn_device") or {}
    name = device.get("name") if isinstance(device, dict) else None
    if not name:
        return None
    return name if device.get("kind", "cuda") == "cuda" else f"CPU {name}"


def save_baseline(path: Path, run: dict[str, Any], fingerprint: Fingerprint, *, force: bool = False,
                  add: bool = False, restart_retimed: bool = False) -> str:
    """Write ``run`` as the baseline at ``path`` (atomically, under a lock); returns what was done. Refuses
    (raises :class:`BaselineError`) to replace a baseline of another device, or a corrupt one, unless
    ``force``. With ``add``, ``run`` joins the stored baseline as one more repeat (:func:`add_repeat`)."""
    data = dict(run)
    data["machine_info"] = {**(run.get("machine_info") or {}), "attn_fingerprint": fingerprint.as_dict()}
    check_run(data, f"the run to save as {path}")
    path.parent.mkdir(parents=True, exist_ok=True)
    from filelock import FileLock, Timeout  # here: 5 ms to import, in every pytest session otherwise

    lock_file = lock_path(path)
    if lock_file.is_symlink():  # filelock opens it with O_TRUNC: through a link, it would empty the target
        raise BaselineError(f"{lock_file} is a symbolic link (to {os.readlink(lock_file)}); pytest-attn does not"
                            " write through a link it did not make. Remove it and rerun; nothing saved")
    lock = FileLock(str(lock_file), timeout=LOCK_TIMEOUT_S)
    try:
        with lock:
            if add:
                if not path.exists():
                    raise BaselineError(f"no baseline at {path} to add a repeat to; record one first with"
                                        " --attn-save-baseline")
                _may_replace(path, fingerprint, force=False)
                old = load_baseline(path)
                fingerprint = _as_repeat(str(path), stored_fingerprint(old), fingerprint)
                data["machine_info"]["attn_fingerprint"] = fingerprint.as_dict()
                data, added, refused = add_repeat(old, data, restart_retimed=restart_retimed)
                note = f" (a repeat added to {added} cases){refused_note(refused)}"
            else:
                note = _may_replace(path, fingerprint, force)
            _write(path, data)
    except Timeout:
        raise BaselineError(f"another process has held the lock on {path} ({lock_path(path)}) for over"
                            f" {LOCK_TIMEOUT_S:.0f} s; nothing saved. If no other save is running, delete that"
                            " lock file") from None
    return f"saved {len(data['benchmarks'])} results as the baseline for {fingerprint.device}: {path}{note}"


def _as_repeat(where: str, stored: Fingerprint | None, fingerprint: Fingerprint) -> Fingerprint:
    """``fingerprint`` as a baseline of ``stored`` keeps it when the run joins as a repeat (:func:`.repeat_of`)."""
    try:
        return repeat_of(stored, fingerprint)
    except ValueError as exc:
        raise BaselineError(f"{where}: {exc}") from None


def lock_path(path: Path) -> Path:
    """The lock file a save of the baseline ``path`` holds: in the temporary folder, named for the baseline's
    absolute path -- not beside it, where ``git add baselines/`` would commit it. filelock leaves its file behind
    by design, and deleting it after the release would break the lock: a process waiting on the old file and one
    creating a new one would both hold "the lock"."""
    key = hashlib.sha256(str(path.resolve()).encode()).hexdigest()[:16]
    return Path(tempfile.gettempdir()) / f"pytest-attn-baseline-{key}.lock"


def _may_replace(path: Path, fingerprint: Fingerprint, force: bool) -> str:
    """The overwrite rule, read under the lock: "" for a new file, a note for a replaced one."""
    if not path.exists():
        return ""
    try:
        old: dict[str, Any] | None = load_baseline(path)
    except BaselineError as exc:
        if not force:
            raise BaselineError(f"{exc}. Not overwritten; pass --attn-force to replace it") from None
        old = None
    old_fp = stored_fingerprint(old) if old else None
    if old_fp is not None and not force:
        blocking, _ = differences(old_fp, fingerprint)
        if blocking:
            raise BaselineError(f"baseline {path} was recorded on another device ({'; '.join(blocking)}); not"
                                " replaced. Pass --attn-force to replace it anyway")
    return " (replacing the previous one)"


def _write(path: Path, data: dict[str, Any]) -> None:
    try:
        text = json.dumps(data, indent=2, sort_keys=True, allow_nan=False) + "\n"
    except ValueError as exc:  # a NaN or infinity json cannot write as a number
        raise BaselineError(f"the run holds a number JSON cannot store ({exc}); nothing saved") from None
    try:
        write_atomic(path, text)
    except OSError as exc:
        raise BaselineError(f"cannot write {path} ({exc.strerror or exc}); the baseline there is as it was."
                            " Free space (or give --attn-baselines-dir a folder with room) and rerun") from None


def add_runs(path: Path, runs: list[tuple[str, dict[str, Any]]], *, restart_retimed: bool = False) -> list[str]:
    """Saved runs (``--benchmark-json`` files of the baseline's selection, from other GPUs or hosts of its model)
    added to the baseline at ``path`` as repeats, each tagged with the GPU that measured it; the first run
    records the baseline where there is none. A run without a fingerprint, or of another device, is refused
    before anything is written. ``restart_retimed``: see :func:`add_repeat`. Returns what was done, a line per run.
    """
    checked = []
    for where, run in runs:
        check_run(run, where)
        fingerprint = stored_fingerprint(run)
        if fingerprint is None:
            raise BaselineError(f"{where} has no fingerprint (machine_info.attn_fingerprint): it cannot be told to be"
                                " from this baseline's device. Give the JSON a pytest-attn run wrote")
        if partial_note(run):
            raise BaselineError(f"{where} is a partial run ({partial_note(run)}): a repeat must be a whole run")
        if run.get("attn_reruns"):  # its records hold one run's median each: the rest would be lost
            raise BaselineError(f"{where} is runs gated as one (pytest-attn merge --reruns): add the runs"
                                f" themselves ({', '.join(map(str, run['attn_reruns']))}), each a repeat")
        checked.append((where, run, fingerprint))
    stored = stored_fingerprint(load_baseline(path)) if path.exists() else None
    for where, _, fingerprint in checked:  # every run is checked against the first before any is written
        _as_repeat(where, stored or checked[0][2], fingerprint)
    lines = []
    for where, run, fingerprint in checked:
        add = path.exists()
        lines.append(f"{where}: {save_baseline(path, run, fingerprint, add=add, restart_retimed=restart_retimed)}")
    return lines
