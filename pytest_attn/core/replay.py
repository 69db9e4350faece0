"""A workload's records as the problems ``--attn-workload`` runs: each replayable record becomes a
:class:`~pytest_attn.core.catalog.Variant` of the suite it belongs to (prefill, decode, varlen), the way an
``--attn-case`` does; a record the plugin cannot express keeps its reason. Pure.

The case of record ``N`` of workload ``W`` is named ``wl-W-rN``. What is not replayed: the softmax scale (it
does not change the work), and the call's own memory layout (each back end takes its own)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from .adhoc import DECODE_MAX_QUERIES
from .case import KvCache, Mask
from .catalog import Shape, Variant
from .workload import Call, Workload, WorkloadError, WorkloadRecord, load_workload


@dataclass(frozen=True)
class Replay:
    """A workload read from ``origin`` (the path as the user gave it): its variants by record order, and
    the records it cannot replay with why."""

    origin: str
    workload: Workload
    variants: tuple[tuple[WorkloadRecord, Variant], ...]
    refused: tuple[tuple[WorkloadRecord, str], ...]

    def record_of(self, shape: str) -> WorkloadRecord | None:
        return next((r for r, v in self.variants if v.shape.name == shape), None)


def case_name(workload: Workload, record: WorkloadRecord) -> str:
    return f"wl-{workload.name}-r{record.order}"


def _mask(call: Call) -> Mask | str:
    if call.mask in ("none", "causal"):
        return Mask.none() if call.mask == "none" else Mask.causal()
    if call.mask == "window" and call.window is not None:
        return Mask.window(*call.window)
    if call.mask == "padding":
        return Mask.causal() if call.window == (-1, 0) else Mask.none()
    return f"a {call.mask} mask is replayed only as none, causal, window or padding"


def _shape(name: str, call: Call, source: str) -> Shape | str:
    heads = (call.heads, call.kv_heads, call.head_dim)
    lq = call.seqlens_q or (call.seqlen_q,) * call.batch
    lk = call.seqlens_k or (call.seqlen_k,) * call.batch
    causal = call.mask == "causal" or call.window == (-1, 0)
    few = len(set(lq)) == 1 and lq[0] <= DECODE_MAX_QUERIES and lq[0] < min(lk)
    if call.kv_cache or (call.mask == "padding" and few):
        if not few:
            return f"a KV-cache call with {sorted(set(lq))} queries per request: replayed only as a decode step"
        if len(set(lk)) == 1 and not call.append:
            return Shape(name, call.batch, lq[0], lk[0], *heads, causal, source, decode=True)
        cache = KvCache(max(lk), call.append, 0, "captured")
        return Shape(name, call.batch, lq[0], max(lk), *heads, causal, source, decode=True, cache=cache,
                     seqlens_k=lk)
    if len(set(lq)) > 1 or len(set(lk)) > 1:
        if lq != lk:
            return "a ragged batch whose query and key lengths differ: not replayable yet"
        return Shape(name, call.batch, max(lq), max(lk), *heads, causal, source, seqlens=lq)
    return Shape(name, call.batch, lq[0], lk[0], *heads, causal, source,
                 decode=lq[0] < lk[0] and lq[0] <= DECODE_MAX_QUERIES)


def record_variant(workload: Workload, record: WorkloadRecord, origin: str) -> Variant | str:
    """The problem a record stands for, or why it has none."""
    call = record.call
    if call.unsupported:
        return call.unsupported
    mask = _mask(call)
    source = f"--attn-workload {origin}: record {record.order} ({call.api} at {record.site}, x{record.count})"
    shape = _shape(case_name(workload, record), call, source)
    if isinstance(mask, str) or isinstance(shape, str):
        return mask if isinstance(mask, str) else str(shape)
    return Variant(shape, call.dtype, mask, call.direction)


def replay(workload: Workload, origin: str) -> Replay:
    variants, refused = [], []
    for record in workload.records:
        try:
            got = record_variant(workload, record, origin)
        except ValueError as exc:  # a case the core refuses (CaseError): said, not raised
            got = str(exc)
        if isinstance(got, str):
            refused.append((record, got))
        else:
            variants.append((record, got))
    return Replay(origin, workload, tuple(variants), tuple(refused))


#: The shipped workloads (package data: ``pytest_attn/workloads/``), replayed by name wherever pytest-attn is installed.
SHIPPED = Path(__file__).resolve().parents[1] / "workloads"


def shipped() -> list[str]:
    return sorted(p.name.removesuffix(".workload.json") for p in SHIPPED.glob("*.workload.json"))


def replay_file(text: str) -> Replay:
    """``--attn-workload FILE`` (or the name of a shipped workload): the file read and turned into problems;
    :class:`WorkloadError` (a ValueError) names the file as given and the folder it was looked for from."""
    path = Path(text).expanduser()
    if not path.is_file() and text in shipped():
        path = SHIPPED / f"{text}.workload.json"
    if not path.is_file():
        names = f" or a shipped workload's name ({', '.join(shipped())})" if shipped() else ""
        raise WorkloadError(f"no workload file {text!r} (looked from {Path.cwd()}); give a file{names}, or write"
                            " one with `python -m pytest_attn.capture OUT.json script.py`")
    return replay(load_workload(path), text)
