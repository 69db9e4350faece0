"""Figures of one result: TFLOP/s, MFU both ways, bandwidth, intensity, bound; and its share of the
ceilings measured on the GPU (:mod:`pytest_attn.engine.ceilings` measures them). Pure."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

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


@dataclass
class Ceilings:
    """What this GPU reaches on a large matrix product (TFLOP/s per dtype) and a device copy (TB/s)."""

    matmul_tflops: dict[str, float] = field(default_factory=dict)
    copy_tbps: float | None = None

    def describe(self) -> str:
        mm = ", ".join(f"{dt} matmul {v:.1f} TFLOP/s" for dt, v in sorted(self.matmul_tflops.items()))
        copy = f"copy {self.copy_tbps:.2f} TB/s" if self.copy_tbps else "copy not measured"
        return f"measured ceilings: {mm or 'matmul not measured'}, {copy}"


@dataclass(frozen=True)
class CeilingShare:
    """A case's share of the measured ceilings (None where a ceiling is not known)."""

    matmul_tflops: float | None = None
    fraction_of_matmul: float | None = None
    copy_tbps: float | None = None
    fraction_of_copy: float | None = None

    def of_bound(self, bound: str) -> float | None:
        """The share of the ceiling that bounds the case: matmul when compute-bound, copy otherwise."""
        return self.fraction_of_matmul if bound == "compute" else self.fraction_of_copy


def ceiling_share(tflops: float, tbps: float, dtype: str, ceilings: Ceilings | None) -> CeilingShare:
    mm = ceilings.matmul_tflops.get(dtype) if ceilings else None
    copy = ceilings.copy_tbps if ceilings else None
    return CeilingShare(mm, tflops / mm if mm else None, copy, tbps / copy if copy else None)


#: A figure this far above a peak of the silicon (the datasheet's, or the one at the SM clock it ran at) is
#: impossible: no kernel does more than the tensor cores or the memory can.
IMPOSSIBLE = 1.05
#: ... or this far above a ceiling measured on this GPU (a large matmul, a device copy): those ran at their own
#: clock and power draw, and a kernel drawing less power may run at a higher clock than a power-capped matmul.
MEASURED_IMPOSSIBLE = 1.25
#: On a CPU: attention (two matmuls and a softmax) this many times faster than the CPU's fastest matmul (a 256^3
#: product, in the dtype it runs fastest: on the 2-core CI machine fp32 at 86-123 GFLOP/s, bf16 at 1.4).
CPU_IMPOSSIBLE = 4.0


def impossible_figure(f: Figures, share: CeilingShare | None = None, warm_l2: bool = False,
                      cpu_matmul_gflops: float | None = None) -> str | None:
    """Why ``f`` is faster than the hardware can be, naming the ceiling it passes; None when it is possible. A
    byte rate is judged only where the inputs came from memory (a cold L2): from L2 a small case honestly
    moves its bytes faster than HBM. A peak the user gave (``--attn-peak-tflops``) is theirs, not checked."""
    if f.peak_source != "--attn-peak-tflops":
        if f.mfu_at_clock is not None and f.mfu_at_clock > IMPOSSIBLE:
            return (f"{f.tflops:,.1f} TFLOP/s is {f.mfu_at_clock:.0%} of this GPU's dense peak at the SM clock it ran"
                    f" at ({f.peak_at_clock_tflops:,.1f} TFLOP/s)")
        if f.mfu_datasheet is not None and f.mfu_datasheet > IMPOSSIBLE:
            return (f"{f.tflops:,.1f} TFLOP/s is {f.mfu_datasheet:.0%} of the datasheet's dense peak"
                    f" ({f.peak_tflops:,.1f})")
    if share is not None and share.fraction_of_matmul is not None and share.fraction_of_matmul > MEASURED_IMPOSSIBLE:
        return (f"{f.tflops:,.1f} TFLOP/s is {share.fraction_of_matmul:.0%} of the matmul ceiling measured on this GPU"
                f" ({share.matmul_tflops:,.1f} TFLOP/s)")
    if not warm_l2:
        if f.bandwidth_fraction is not None and f.bandwidth_fraction > IMPOSSIBLE:
            return (f"it moves its minimal bytes at {f.tbps:,.2f} TB/s, {f.bandwidth_fraction:.0%} of the memory's"
                    " datasheet bandwidth")
        if share is not None and share.fraction_of_copy is not None and share.fraction_of_copy > MEASURED_IMPOSSIBLE:
            return (f"it moves its minimal bytes at {f.tbps:,.2f} TB/s, {share.fraction_of_copy:.0%} of the copy"
                    f" ceiling measured on this GPU ({share.copy_tbps:,.2f} TB/s)")
    if cpu_matmul_gflops and f.tflops * 1e3 > CPU_IMPOSSIBLE * cpu_matmul_gflops:
        return (f"{f.tflops * 1e3:,.1f} GFLOP/s is {f.tflops * 1e3 / cpu_matmul_gflops:,.0f}x this CPU's own matmul"
                f" rate ({cpu_matmul_gflops:,.1f} GFLOP/s)")
    return None
