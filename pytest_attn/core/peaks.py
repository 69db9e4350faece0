"""Peak tensor-core rates, datasheet and clock-aware. Pure.

``peak = SMs x dense FLOPs per clock per SM x SM clock``. The datasheet figure assumes the vendor's
spec clock; the *clock-aware* peak uses the SM clock NVML read during the measurement, so a GPU
boosting above its spec clock (RTX 4090) or throttled below it (an H200 at 1650 MHz) is visible.
Figures: dense (no sparsity), FP32 accumulate (what FlashAttention kernels use), from the vendors'
datasheets as collected in ``shared/facts/gpu-peaks.md``.

``fp32`` cases have no tensor-core peak here (PyTorch leaves TF32 off for matmuls by default), so
their MFU is "n/a".
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Dense FLOPs per clock per SM for 16-bit inputs with FP32 accumulate, by architecture.
# fp8 runs at twice the 16-bit rate; tf32 at half of it (sm80, sm90).
ARCH_16BIT_FLOPS_PER_CLK: dict[tuple[int, int], int] = {
    (8, 0): 2048,   # A100, A800
    (9, 0): 4096,   # H100, H800, H200, H20
    (10, 0): 8192,  # B200, GB200 (derived from datasheet totals)
}

PEAK_DTYPE = {"fp16": "16bit", "bf16": "16bit", "fp8": "fp8"}


@dataclass(frozen=True)
class GpuSpec:
    """One row of the peak table."""

    pattern: str  # regex matched against the name the driver reports
    label: str
    tflops_16bit: float
    tflops_fp8: float | None
    sm_count: int | None
    spec_clock_mhz: float | None  # None: the datasheet does not state it
    flops_per_clk_per_sm: int  # 16-bit dense, FP32 accumulate
    mem_tbps: float | None = None
    derivable: bool = True  # False for capped parts whose rate is not SMs x clock x per-SM rate

    def datasheet_tflops(self, dtype: str) -> float | None:
        kind = PEAK_DTYPE.get(dtype)
        if kind == "16bit":
            return self.tflops_16bit
        if kind == "fp8":
            return self.tflops_fp8
        return None

    def per_sm_flops_per_clk(self, dtype: str) -> int | None:
        kind = PEAK_DTYPE.get(dtype)
        if kind is None or not self.derivable:
            return None
        return self.flops_per_clk_per_sm * (2 if kind == "fp8" else 1)


# Order matters: more specific names first. Word boundaries keep GH200 from matching H200.
GPU_TABLE: tuple[GpuSpec, ...] = (
    GpuSpec(r"\bH100 NVL\b", "H100 NVL", 835, 1671, 132, None, 4096),
    GpuSpec(r"\bH100 PCIe\b", "H100 PCIe", 756, 1513, 114, 1620, 4096),
    GpuSpec(r"\bH100\b|\bH800\b", "H100 SXM / H800", 989, 1979, 132, 1830, 4096, mem_tbps=3.35),
    GpuSpec(r"\bH200\b", "H200", 989, 1979, 132, 1830, 4096, mem_tbps=4.8),
    GpuSpec(r"\bH20\b", "H20", 148, 296, None, None, 4096, derivable=False),
    GpuSpec(r"\bA100\b.*80GB", "A100 80GB", 312, None, 108, 1410, 2048, mem_tbps=2.04),
    GpuSpec(r"\bA100\b|\bA800\b", "A100 / A800", 312, None, 108, 1410, 2048),
    GpuSpec(r"\bL40S\b", "L40S", 362, 733, 142, None, 1024),
    GpuSpec(r"\bL4\b", "L4", 121, 242, 58, 2040, 1024),
    GpuSpec(r"RTX 4090", "RTX 4090", 165.2, 330.3, 128, 2520, 512, mem_tbps=1.01),
    GpuSpec(r"RTX 3090", "RTX 3090", 71, None, 82, 1695, 512),
    GpuSpec(r"RTX A6000", "RTX A6000", 154.8, None, 84, 1800, 1024),
    GpuSpec(r"\bGB200\b", "GB200", 2500, 5000, 148, None, 8192),
    GpuSpec(r"\bB200\b", "B200", 2250, 4500, 148, None, 8192, mem_tbps=8.0),
)


def lookup(gpu_name: str) -> GpuSpec | None:
    """The table row for a GPU name as the driver reports it, or None if unknown."""
    for spec in GPU_TABLE:
        if re.search(spec.pattern, gpu_name):
            return spec
    return None


@dataclass(frozen=True)
class Peak:
    """The peaks that apply to one dtype on one device.

    ``datasheet_tflops`` is the vendor figure (or the user's ``--attn-peak-tflops``);
    ``flops_per_clk`` (SMs x per-SM rate) turns an observed SM clock into the clock-aware peak.
    """

    dtype: str
    datasheet_tflops: float | None
    flops_per_clk: float | None
    mem_tbps: float | None
    source: str
    note: str = ""

    def at_clock_tflops(self, sm_clock_mhz: float | None) -> float | None:
        if self.flops_per_clk is None or not sm_clock_mhz:
            return None
        return self.flops_per_clk * sm_clock_mhz * 1e6 / 1e12


def peak_for(
    gpu_name: str | None,
    compute_capability: tuple[int, int] | None,
    sm_count: int | None,
    dtype: str,
    override_tflops: float | None = None,
) -> Peak:
    """Resolve the peaks for ``dtype`` on a device; unknown parts give None with a note."""
    spec = lookup(gpu_name) if gpu_name else None
    if dtype not in PEAK_DTYPE:
        note = f"{dtype}: no tensor-core peak applies (TF32 is off by default), MFU is n/a"
        return Peak(dtype, override_tflops, None, spec.mem_tbps if spec else None,
                    "--attn-peak-tflops" if override_tflops else "none", note)
    device_per_clk: float | None = None
    if spec is not None:
        per_sm_rate = spec.per_sm_flops_per_clk(dtype)
        sms = sm_count or spec.sm_count
        if per_sm_rate is not None and sms:
            device_per_clk = per_sm_rate * sms
    elif compute_capability in ARCH_16BIT_FLOPS_PER_CLK and sm_count:
        device_per_clk = ARCH_16BIT_FLOPS_PER_CLK[compute_capability] * sm_count * (2 if dtype == "fp8" else 1)
    if override_tflops is not None:
        return Peak(dtype, override_tflops, device_per_clk, spec.mem_tbps if spec else None, "--attn-peak-tflops")
    if spec is not None:
        ds = spec.datasheet_tflops(dtype)
        note = "" if ds is not None else f"{spec.label} has no {dtype} tensor-core rate in the peak table"
        if not spec.derivable:
            note = f"{spec.label} is a capped part: its rate is not SMs x clock, so no clock-aware peak"
        return Peak(dtype, ds, device_per_clk, spec.mem_tbps, f"datasheet: {spec.label}", note)
    name = gpu_name or "this device"
    return Peak(
        dtype, None, device_per_clk, None, "unknown",
        f"{name} is not in the peak table: MFU is n/a; pass --attn-peak-tflops=<dense {dtype} TFLOP/s>",
    )
