"""What device a result was measured on: facts only (the engine's :mod:`pytest_attn.engine.probe`
reads them from CUDA and NVML when a test first needs the device, never at import or collection)."""

from __future__ import annotations

from dataclasses import dataclass

from .peaks import Peak, peak_for


@dataclass(frozen=True)
class DeviceInfo:
    kind: str  # "cuda" or "cpu"
    name: str
    torch_version: str
    index: int | None = None
    compute_capability: tuple[int, int] | None = None
    sm_count: int | None = None
    l2_bytes: int | None = None
    total_memory_bytes: int | None = None
    driver: str | None = None
    cuda_version: str | None = None
    max_sm_clock_mhz: int | None = None
    power_limit_w: float | None = None
    nvml_status: str = "not used"
    uuid: str | None = None  # NVML's "GPU-..." form, where known
    host_index: int | None = None  # under pytest-xdist: this GPU's place among the run's GPUs (its worker's)
    ecc: str | None = None  # "on"/"off", where NVML says
    mig: str | None = None  # "on"/"off", where NVML says (None: no MIG on this GPU)

    @property
    def is_cuda(self) -> bool:
        return self.kind == "cuda"

    def peak(self, dtype: str, override_tflops: float | None = None) -> Peak:
        if not self.is_cuda:
            return Peak(dtype, override_tflops, None, None,
                        "--attn-peak-tflops" if override_tflops else "none",
                        "CPU run: no GPU peak, MFU is n/a")
        return peak_for(self.name, self.compute_capability, self.sm_count, dtype, override_tflops)

    def as_machine_info(self) -> dict[str, object]:
        """What pytest-benchmark's ``machine_info`` gets under the key ``attn_device``."""
        return {
            "kind": self.kind,
            "name": self.name,
            "compute_capability": ".".join(map(str, self.compute_capability)) if self.compute_capability else None,
            "sm_count": self.sm_count,
            "l2_bytes": self.l2_bytes,
            "total_memory_bytes": self.total_memory_bytes,
            "driver": self.driver,
            "cuda": self.cuda_version,
            "torch": self.torch_version,
            "max_sm_clock_mhz": self.max_sm_clock_mhz,
            "power_limit_w": self.power_limit_w,
            "nvml": self.nvml_status,
            "uuid": self.uuid,
            "host_index": self.host_index,
            "ecc": self.ecc,
            "mig": self.mig,
        }

    def describe(self) -> str:
        if not self.is_cuda:
            return f"CPU ({self.name}), torch {self.torch_version}"
        cc = ".".join(map(str, self.compute_capability or ()))
        mem = f"{(self.total_memory_bytes or 0) / 2**30:.0f} GiB"
        return (
            f"{self.name} (sm{cc.replace('.', '')}, {self.sm_count} SMs, {mem}, "
            f"L2 {(self.l2_bytes or 0) / 2**20:.0f} MiB), driver {self.driver or '?'}, "
            f"CUDA {self.cuda_version or '?'}, torch {self.torch_version}"
        )
