"""What a stored result was measured on, and whether two runs may be compared.

pytest-benchmark's machine id has no GPU in it. A :class:`Fingerprint` adds what decides a figure:
the device (the GPU's name, SM count and memory; on a CPU run, the CPU model), driver, CUDA, torch,
flash-attn (FA2), flash-attn-4 and FlashInfer versions, the clock policy (locked or not, and to what), the power limit,
ECC and MIG, and on a CPU the thread count. A difference in the device itself *blocks* a comparison
(an H100 is not a slower H200, a CPU is not a slow GPU); a difference in software or settings
*informs*: it is named beside the verdicts, because it may be the reason for them.
"""

from __future__ import annotations

import re
from dataclasses import asdict, dataclass, fields
from importlib import metadata
from typing import Any

from ..core.device import DeviceInfo

BLOCKING = ("kind", "gpu", "sm_count", "memory_gib")
INFORMING = ("driver", "cuda", "torch", "flash_attn", "flash_attn_4", "flashinfer", "clocks", "power_limit_w", "ecc",
             "mig", "cpu_threads")


def gpu_key(name: str) -> str:
    """A folder name for a GPU: ``NVIDIA H200`` -> ``nvidia-h200``."""
    key = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return key or "unknown-gpu"


def library_version(distribution: str) -> str | None:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return None


@dataclass(frozen=True)
class Fingerprint:
    gpu: str  # the GPU's name; on a CPU run, the CPU model
    sm_count: int | None = None
    memory_gib: int | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    flash_attn: str | None = None
    flashinfer: str | None = None
    clocks: str = "not locked"
    power_limit_w: float | None = None
    kind: str = "cuda"  # "cuda" or "cpu"
    ecc: str | None = None
    mig: str | None = None
    cpu_threads: str | None = None  # a CPU run: torch's thread count and why
    flash_attn_4: str | None = None  # FlashAttention-4 (flash_attn.cute), a distribution of its own

    @property
    def key(self) -> str:
        """The baselines folder: ``nvidia-h200``; ``cpu-amd-epyc`` for a CPU model."""
        return gpu_key(self.gpu) if self.kind == "cuda" else f"cpu-{gpu_key(self.gpu)}"

    @property
    def device(self) -> str:
        """The device for people: the GPU's name, or "CPU <model>"."""
        return self.gpu if self.kind == "cuda" else f"CPU {self.gpu}"

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fingerprint:
        known = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or not isinstance(data.get("gpu"), str) or not data["gpu"].strip():
            raise ValueError("a fingerprint needs a non-empty 'gpu' entry (the device's name)")
        if data.get("kind", "cuda") not in ("cuda", "cpu"):
            raise ValueError(f"a fingerprint's 'kind' is cuda or cpu, not {data.get('kind')!r}")
        return cls(**{k: v for k, v in data.items() if k in known})


def fingerprint_of(device: DeviceInfo, clocks: str = "not locked", cpu_threads: str | None = None) -> Fingerprint:
    memory = round(device.total_memory_bytes / 2**30) if device.total_memory_bytes else None
    return Fingerprint(
        gpu=device.name,
        sm_count=device.sm_count,
        memory_gib=memory,
        driver=device.driver,
        cuda=device.cuda_version,
        torch=device.torch_version,
        flash_attn=library_version("flash-attn") or library_version("flash_attn"),
        flashinfer=library_version("flashinfer-python") or library_version("flashinfer"),
        clocks=clocks,
        power_limit_w=device.power_limit_w,
        kind="cuda" if device.is_cuda else "cpu",
        ecc=device.ecc,
        mig=device.mig,
        cpu_threads=None if device.is_cuda else cpu_threads,
        flash_attn_4=library_version("flash-attn-4"),
    )


def differences(baseline: Fingerprint, current: Fingerprint) -> tuple[list[str], list[str]]:
    """(blocking, informing) differences, each as ``field: baseline value -> this run's value``."""
    out: dict[str, list[str]] = {"blocking": [], "informing": []}
    for name, group in [(n, "blocking") for n in BLOCKING] + [(n, "informing") for n in INFORMING]:
        a, b = getattr(baseline, name), getattr(current, name)
        if a != b and not (a is None or b is None):
            label = "cpu" if name == "gpu" and "cpu" in (baseline.kind, current.kind) else name  # the CPU model
            out[group].append(f"{label}: {a} (baseline) -> {b} (this run)")
    return out["blocking"], out["informing"]
