"""Stored baselines: ``baselines/<gpu-key>/baseline.json`` in pytest-benchmark's JSON format, with the
run's fingerprint in ``machine_info.attn_fingerprint``.

Reading checks the file and says what is wrong with it; writing goes through a temporary file in the
same folder and a rename, so a baseline is either the old one or the new one, never half of each. A
baseline recorded on another GPU is not replaced unless forced; a corrupt one is never overwritten
silently.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path
from typing import Any

from .fingerprint import Fingerprint, differences

FILE_NAME = "baseline.json"
RERECORD = "re-record it with: pytest suites/ --attn-save-baseline"


class BaselineError(Exception):
    """A baseline that cannot be used; the message names the file and what is wrong."""


def baseline_path(root: Path, key: str) -> Path:
    return root / key / FILE_NAME


def load_baseline(path: Path) -> dict[str, Any]:
    """The run stored at ``path``, checked: JSON, a ``benchmarks`` list, each with a name and a
    positive ``stats.median``."""
    try:
        text = path.read_text()
    except OSError as exc:
        raise BaselineError(f"baseline {path} cannot be read: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise BaselineError(
            f"baseline {path} is not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg}); restore it from"
            f" git or {RERECORD}"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("benchmarks"), list):
        raise BaselineError(f"baseline {path} has no 'benchmarks' list: it is not pytest-benchmark JSON; {RERECORD}")
    for i, bench in enumerate(data["benchmarks"]):
        median = (bench.get("stats") or {}).get("median") if isinstance(bench, dict) else None
        if not isinstance(bench, dict) or not (bench.get("fullname") or bench.get("name")):
            raise BaselineError(f"baseline {path}: benchmark #{i} has no name; {RERECORD}")
        if not isinstance(median, (int, float)) or not median > 0:
            raise BaselineError(f"baseline {path}: benchmark {bench.get('fullname') or bench.get('name')!r} has no"
                                f" positive stats.median; {RERECORD}")
    return data


def stored_fingerprint(run: dict[str, Any]) -> Fingerprint | None:
    raw = (run.get("machine_info") or {}).get("attn_fingerprint")
    try:
        return Fingerprint.from_dict(raw) if raw else None
    except (TypeError, ValueError):
        return None


def save_baseline(path: Path, run: dict[str, Any], fingerprint: Fingerprint, *, force: bool = False) -> str:
    """Write ``run`` as the baseline at ``path`` (atomically); returns what was done. Refuses (raises
    :class:`BaselineError`) to replace a baseline of another GPU, or a corrupt one, unless ``force``."""
    replaced = ""
    if path.exists():
        try:
            old = load_baseline(path)
        except BaselineError as exc:
            if not force:
                raise BaselineError(f"{exc}. Not overwritten; pass --attn-force to replace it") from None
            old = None
        old_fp = stored_fingerprint(old) if old else None
        if old_fp is not None:
            blocking, _ = differences(old_fp, fingerprint)
            if blocking and not force:
                raise BaselineError(
                    f"baseline {path} was recorded on another GPU ({'; '.join(blocking)}); not replaced. Pass"
                    " --attn-force to replace it anyway"
                )
        replaced = " (replacing the previous one)"
    data = dict(run)
    data["machine_info"] = {**(run.get("machine_info") or {}), "attn_fingerprint": fingerprint.as_dict()}
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=".baseline-", suffix=".json", dir=path.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            json.dump(data, fh, indent=2, sort_keys=True)
            fh.write("\n")
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return f"saved {len(data.get('benchmarks', []))} results as the baseline for {fingerprint.gpu}: {path}{replaced}"
