"""A workload file: the attention calls one model step made, as :mod:`pytest_attn.capture` recorded them. Pure.

A file is JSON: ``{"format": "pytest-attn-workload", "version": 1, "name": ..., "source": ..., "records": [...]}``.
Each record is one distinct call (:class:`Call`: the shape in the plugin's terms, no tensor data), how many
times the step made it (``count``), the order of its first appearance and the ``nn.Module`` paths it came
from. A call the plugin cannot replay is kept with its reason in ``unsupported``, never dropped.
:func:`load_workload` reads a file back with errors that name the file, the record and the field.
"""

from __future__ import annotations

import dataclasses
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

FORMAT = "pytest-attn-workload"
VERSION = 1
MASK_KINDS: tuple[str, ...] = ("none", "causal", "window", "padding", "custom")


class WorkloadError(ValueError):
    """A workload file that cannot be read; the message names the file and what to do."""


@dataclass(frozen=True)
class Call:
    """One attention call's shape. Uniform batches give ``batch``, ``seqlen_q`` and ``seqlen_k``; ragged or
    padded ones also give each sequence's lengths in ``seqlens_q`` / ``seqlens_k`` (the longest in
    ``seqlen_q`` / ``seqlen_k``). ``mask`` is one of :data:`MASK_KINDS`: ``window`` carries ``window``
    (flash-attn's (left, right), bottom-right aligned), a boolean or additive mask its ``density`` (the share
    of (query, key) pairs visible). ``page_size`` > 0: the keys sat in a paged cache."""

    api: str
    batch: int
    seqlen_q: int
    seqlen_k: int
    heads: int
    kv_heads: int
    head_dim: int
    head_dim_v: int
    dtype: str
    mask: str = "none"
    window: tuple[int, int] | None = None
    density: float | None = None
    seqlens_q: tuple[int, ...] = ()
    seqlens_k: tuple[int, ...] = ()
    page_size: int = 0
    kv_cache: bool = False  # the keys sat in a KV cache (flash_attn_with_kvcache, FlashInfer's paged calls)
    append: int = 0  # with kv_cache: new keys the call wrote into the cache per request before attending
    is_causal: bool = False
    scale: float | None = None
    enable_gqa: bool = False
    softcap: float = 0.0
    direction: str = "fwd"
    unsupported: str = ""  # why the plugin cannot replay this call ("" when it can)


@dataclass(frozen=True)
class WorkloadRecord:
    """A distinct call, the number of identical calls folded into it, its first appearance (0, 1, ...) and the
    ``nn.Module`` paths that made it, in the order they first did."""

    call: Call
    count: int
    order: int
    sites: tuple[str, ...] = ()

    @property
    def site(self) -> str:
        """The call sites as one pattern: ``model.layers.0.self_attn`` and ``...1.self_attn`` read
        ``model.layers.*.self_attn``; different patterns are joined with ``|``."""
        patterns = dict.fromkeys(re.sub(r"(?<=\.)\d+(?=\.|$)", "*", s) for s in self.sites)
        return "|".join(patterns) or "<no module>"


@dataclass(frozen=True)
class Workload:
    name: str
    records: tuple[WorkloadRecord, ...]
    source: str = ""  # how it was captured: the command, torch's version

    @property
    def unsupported(self) -> tuple[WorkloadRecord, ...]:
        return tuple(r for r in self.records if r.call.unsupported)


def to_json(workload: Workload) -> dict[str, Any]:
    records = [{**dataclasses.asdict(r.call), "count": r.count, "order": r.order, "sites": list(r.sites)}
               for r in workload.records]
    return {"format": FORMAT, "version": VERSION, "name": workload.name, "source": workload.source,
            "records": records}


def dumps(workload: Workload) -> str:
    """The file's text: one record a line, so a diff of two captures reads record by record."""
    data = to_json(workload)
    head = json.dumps({k: v for k, v in data.items() if k != "records"})[:-1]
    records = ",\n".join(" " + json.dumps(r) for r in data["records"])
    return f'{head}, "records": [\n{records}\n]}}\n'



_FIELDS = {f.name: f for f in dataclasses.fields(Call)}
_REQUIRED = [n for n, f in _FIELDS.items() if f.default is dataclasses.MISSING]
_INT = ("batch", "seqlen_q", "seqlen_k", "heads", "kv_heads", "head_dim", "head_dim_v", "page_size", "append")


def _value(name: str, raw: Any, where: str) -> Any:
    """One field of a record, checked against its type."""
    def bad(expected: str) -> WorkloadError:
        return WorkloadError(f"{where}: {name}={raw!r} must be {expected}")

    if name in _INT:
        if not isinstance(raw, int) or isinstance(raw, bool) or raw < (0 if name in ("page_size", "append") else 1):
            raise bad("an integer >= 0" if name in ("page_size", "append") else "a positive integer")
        return raw
    if name in ("seqlens_q", "seqlens_k"):
        if not isinstance(raw, list) or not all(isinstance(n, int) and not isinstance(n, bool) and n > 0
                                                for n in raw):
            raise bad("a list of positive integers")
        return tuple(raw)
    if name == "window":
        if raw is None:
            return None
        if not (isinstance(raw, list) and len(raw) == 2 and all(isinstance(n, int) and n >= -1 for n in raw)):
            raise bad("null or [left, right], integers >= -1")
        return (raw[0], raw[1])
    if name in ("density", "scale"):
        if raw is not None and (not isinstance(raw, (int, float)) or isinstance(raw, bool) or raw < 0):
            raise bad("null or a number >= 0")
        return None if raw is None else float(raw)
    if name == "softcap":
        if not isinstance(raw, (int, float)) or isinstance(raw, bool):
            raise bad("a number")
        return float(raw)
    if name in ("is_causal", "enable_gqa", "kv_cache"):
        if not isinstance(raw, bool):
            raise bad("true or false")
        return raw
    if not isinstance(raw, str):
        raise bad("a string")
    if name == "mask" and raw not in MASK_KINDS:
        raise bad(f"one of {', '.join(MASK_KINDS)}")
    if name == "direction" and raw not in ("fwd", "fwd+bwd"):
        raise bad("fwd or fwd+bwd")
    return raw


def _record(raw: Any, where: str) -> WorkloadRecord:
    if not isinstance(raw, dict):
        raise WorkloadError(f"{where}: a record is a JSON object, not {type(raw).__name__}")
    extra = set(raw) - set(_FIELDS) - {"count", "order", "sites"}
    if extra:
        raise WorkloadError(f"{where}: unknown field(s) {', '.join(sorted(extra))}; known: {', '.join(_FIELDS)},"
                            " count, order, sites")
    missing = [n for n in (*_REQUIRED, "count", "order") if n not in raw]
    if missing:
        raise WorkloadError(f"{where}: missing field(s) {', '.join(missing)}")
    call = Call(**{n: _value(n, raw[n], where) for n in _FIELDS if n in raw})
    count, order, sites = raw["count"], raw["order"], raw.get("sites", [])
    if not isinstance(count, int) or isinstance(count, bool) or count < 1:
        raise WorkloadError(f"{where}: count={count!r} must be a positive integer")
    if not isinstance(order, int) or isinstance(order, bool) or order < 0:
        raise WorkloadError(f"{where}: order={order!r} must be an integer >= 0")
    if not isinstance(sites, list) or not all(isinstance(s, str) for s in sites):
        raise WorkloadError(f"{where}: sites must be a list of module paths (strings)")
    return WorkloadRecord(call, count, order, tuple(sites))


def from_json(data: Any, origin: str = "the workload") -> Workload:
    """A workload from its JSON object; :class:`WorkloadError` names ``origin``, the record and the field."""
    if not isinstance(data, dict) or data.get("format") != FORMAT:
        raise WorkloadError(f"{origin} is not a pytest-attn workload (no \"format\": \"{FORMAT}\"); write one with"
                            " `python -m pytest_attn.capture OUT.json script.py`")
    version = data.get("version")
    if not isinstance(version, int) or isinstance(version, bool) or version < 1:
        raise WorkloadError(f"{origin}: version={version!r} must be a positive integer")
    if version > VERSION:
        raise WorkloadError(f"{origin} is a workload of format version {version}; this pytest-attn reads version"
                            f" {VERSION} and older: upgrade pytest-attn (pip install -U pytest-attn), or capture"
                            " the workload again with this one")
    name, records = data.get("name"), data.get("records")
    if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9._+-]+", name):
        raise WorkloadError(f"{origin}: name={name!r} must be letters, digits and . _ + - (it names test cases)")
    if not isinstance(records, list):
        raise WorkloadError(f"{origin}: records must be a list")
    source = data.get("source", "")
    return Workload(name, tuple(_record(r, f"{origin}, record {i}") for i, r in enumerate(records)),
                    source if isinstance(source, str) else str(source))


def load_workload(path: Path) -> Workload:
    try:
        text = path.read_text()
    except OSError as exc:
        raise WorkloadError(f"cannot read workload {path}: {exc.strerror or exc}") from None
    try:
        data = json.loads(text)
    except json.JSONDecodeError as exc:
        raise WorkloadError(f"{path} is not JSON ({exc}); is it a workload file?") from None
    return from_json(data, str(path))


def workload_name(path: Path) -> str:
    """A workload's default name from its file: ``llama.workload.json`` -> ``llama``."""
    stem = path.name.split(".")[0] or "workload"
    return re.sub(r"[^A-Za-z0-9._+-]", "-", stem)
