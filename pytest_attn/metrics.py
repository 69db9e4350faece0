"""Figures of one result: TFLOP/s, MFU both ways, bandwidth, intensity, bound. Pure."""

from __future__ import annotations

from dataclasses import asdict, dataclass

from .flops import FA2_CONVENTION, Work
from .peaks import Peak


@dataclass(frozen=True)
class Figures:
    median_s: float
    tflops: float
    fa2_tflops: float
    tbps: float
    arithmetic_intensity: float  # FLOPs per minimal byte
    mfu_datasheet: float | None  # fraction of the datasheet (or user) peak
    mfu_at_clock: float | None  # fraction of the peak at the SM clock observed during the case
    peak_tflops: float | None
    peak_at_clock_tflops: float | None
    bandwidth_fraction: float | None  # fraction of datasheet memory bandwidth
    ridge_intensity: float | None  # FLOPs/byte where the roofline turns
    bound: str  # "compute", "memory" or "unknown"
    flops_convention: str
    peak_source: str
    peak_note: str

    def as_extra_info(self) -> dict[str, object]:
        info = asdict(self)
        info["fa2_convention"] = FA2_CONVENTION
        return info


def figures(work: Work, median_s: float, peak: Peak, sm_clock_mhz: float | None) -> Figures:
    if median_s <= 0:
        raise ValueError(f"median_s={median_s!r} must be positive")
    tflops = work.flops / median_s / 1e12
    at_clock = peak.at_clock_tflops(sm_clock_mhz)
    ridge = None
    if peak.datasheet_tflops and peak.mem_tbps:
        ridge = peak.datasheet_tflops / peak.mem_tbps
    ai = work.arithmetic_intensity
    bound = "unknown" if ridge is None else ("compute" if ai >= ridge else "memory")
    tbps = work.min_bytes / median_s / 1e12
    return Figures(
        median_s=median_s,
        tflops=tflops,
        fa2_tflops=work.fa2_flops / median_s / 1e12,
        tbps=tbps,
        arithmetic_intensity=ai,
        mfu_datasheet=tflops / peak.datasheet_tflops if peak.datasheet_tflops else None,
        mfu_at_clock=tflops / at_clock if at_clock else None,
        peak_tflops=peak.datasheet_tflops,
        peak_at_clock_tflops=at_clock,
        bandwidth_fraction=tbps / peak.mem_tbps if peak.mem_tbps else None,
        ridge_intensity=ridge,
        bound=bound,
        flops_convention=work.convention,
        peak_source=peak.source,
        peak_note=peak.note,
    )
