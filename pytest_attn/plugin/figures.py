"""A measured record's figures that need the session: its share of the ceilings measured on this GPU, HBM
traffic where ``--attn-hbm`` asks, and the check that no figure is faster than the hardware can be."""

from __future__ import annotations

import dataclasses

from ..core.codec import case_from_json, case_json
from ..core.metrics import ceiling_share, impossible_figure
from ..core.record import Record
from ..engine import hbm
from .session import AttnSession


def _with_session_figures(session: AttnSession, record: Record) -> Record:
    """The share of the session's measured ceilings, and HBM traffic where ``--attn-hbm`` asks."""
    ceilings = session.ceilings.get(record.device, record.case.dtype)
    share = ceiling_share(record.figures.tflops, record.figures.tbps, record.case.dtype, ceilings)
    pattern = session.options.hbm
    if pattern is None or not record.device.is_cuda or not pattern.search(record.case.id):
        return dataclasses.replace(record, ceilings=share)
    text = case_json(record.case, 0)
    try:
        case_from_json(text)  # the subprocess must be able to rebuild the case (its mask from its id)
        origin = session.registry.origin(record.case.backend)
        traffic = hbm.measure(text, record.work.min_bytes, backends_from=[origin] if origin else [])
    except ValueError as exc:  # a mask that cannot be named for the subprocess
        traffic = f"cannot hand the case to ncu: {exc}"
    if isinstance(traffic, str):
        return dataclasses.replace(record, ceilings=share, hbm_note=traffic)
    return dataclasses.replace(record, ceilings=share, hbm=traffic)


def impossible_why(session: AttnSession, record: Record) -> str | None:
    """The failure of a case whose figure is faster than the hardware can be (see
    :func:`~pytest_attn.core.metrics.impossible_figure`), or None."""
    # a CPU's fastest matmul, in any dtype: its bf16 and fp16 products can run 60x slower than SDPA's own kernels
    rate = max((session.settings.cpu_gflops or {}).values(), default=None) if not record.device.is_cuda else None
    why = impossible_figure(record.figures, record.ceilings, record.timing.l2.endswith("warm between calls"), rate)
    if why is None:
        return None
    return (f"{record.case.id} is timed faster than possible: {why}. No kernel does more than the hardware can: it"
            f" did not do the work it claims (a result kept from an earlier call, work skipped or left running"
            f" after it returned), or its time was not read (median {record.median_s * 1e6:.3g} us by"
            f" {record.timing.timer}); not reported")


def session_figures(session: AttnSession, record: Record) -> Record:
    """The record with the figures that need the session (ceilings' shares, HBM traffic); whether they are
    possible is :func:`impossible_why`'s to say."""
    return _with_session_figures(session, record)
