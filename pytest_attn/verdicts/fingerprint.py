"""What a stored result was measured on, and whether two runs may be compared.

pytest-benchmark's machine id has no GPU in it. A :class:`Fingerprint` adds what decides a figure:
the device (the GPU's name, SM count and memory; on a CPU run, the CPU model), driver, CUDA, torch, the
libraries under test (``libraries``: the installed version of each distribution a registered back end names
-- flash-attn, flash-attn-4, flashinfer-python, a user's own kernel package -- given by the plugin, which holds
the registry), the clock policy (locked or not, and to what), the power limit,
ECC and MIG, and on a CPU the thread count. A difference in the device itself *blocks* a comparison
(an H100 is not a slower H200, a CPU is not a slow GPU); a difference in software or settings
*informs*: it is named beside the verdicts, because it may be the reason for them.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from dataclasses import asdict, dataclass, field, fields
from typing import Any

from ..core.device import DeviceInfo

BLOCKING = ("kind", "gpu", "sm_count", "memory_gib")
INFORMING = ("driver", "cuda", "torch", "libraries", "clocks", "power_limit_w", "ecc", "mig", "cpu_threads")
#: The library fields of fingerprints written before ``libraries`` (baselines up to 0.1), by distribution
FLAT_LIBRARIES = {"flash_attn": "flash-attn", "flash_attn_4": "flash-attn-4", "flashinfer": "flashinfer-python"}


def gpu_key(name: str) -> str:
    """A folder name for a GPU: ``NVIDIA H200`` -> ``nvidia-h200``."""
    key = re.sub(r"[^a-z0-9]+", "-", name.lower()).strip("-")
    return key or "unknown-gpu"


@dataclass(frozen=True)
class Fingerprint:
    gpu: str  # the GPU's name; on a CPU run, the CPU model
    sm_count: int | None = None
    memory_gib: int | None = None
    driver: str | None = None
    cuda: str | None = None
    torch: str | None = None
    clocks: str = "not locked"
    power_limit_w: float | None = None
    kind: str = "cuda"  # "cuda" or "cpu"
    ecc: str | None = None
    mig: str | None = None
    cpu_threads: str | None = None  # a CPU run: torch's thread count and why
    #: the installed version of each distribution the registry's back ends measure, by its canonical name
    libraries: Mapping[str, str] = field(default_factory=dict, hash=False)

    @property
    def key(self) -> str:
        """The baselines folder: ``nvidia-h200``; ``cpu-amd-epyc`` for a CPU model."""
        return gpu_key(self.gpu) if self.kind == "cuda" else f"cpu-{gpu_key(self.gpu)}"

    @property
    def device(self) -> str:
        """The device for people: the GPU's name, or "CPU <model>"."""
        return self.gpu if self.kind == "cuda" else f"CPU {self.gpu}"

    def as_dict(self) -> dict[str, Any]:
        return {**asdict(self), "libraries": dict(self.libraries)}

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Fingerprint:
        """A stored fingerprint; one written before ``libraries`` has its flat library fields read into it."""
        known = {f.name for f in fields(cls)}
        if not isinstance(data, dict) or not isinstance(data.get("gpu"), str) or not data["gpu"].strip():
            raise ValueError("a fingerprint needs a non-empty 'gpu' entry (the device's name)")
        if data.get("kind", "cuda") not in ("cuda", "cpu"):
            raise ValueError(f"a fingerprint's 'kind' is cuda or cpu, not {data.get('kind')!r}")
        libraries = data.get("libraries") or {}
        if not isinstance(libraries, dict) or not all(isinstance(v, str) for v in libraries.values()):
            raise ValueError(f"a fingerprint's 'libraries' maps distribution names to versions, not {libraries!r}")
        flat = {dist: data[key] for key, dist in FLAT_LIBRARIES.items() if isinstance(data.get(key), str)}
        given = {k: v for k, v in data.items() if k in known and k != "libraries"}
        return cls(**given, libraries={**flat, **libraries})


def fingerprint_of(device: DeviceInfo, clocks: str = "not locked", cpu_threads: str | None = None,
                   libraries: Mapping[str, str] | None = None) -> Fingerprint:
    """The fingerprint of a run on ``device``; ``libraries``: the version of each distribution its back ends
    measure (``installed_versions(registry.distributions())`` of :mod:`pytest_attn.backends`)."""
    memory = round(device.total_memory_bytes / 2**30) if device.total_memory_bytes else None
    return Fingerprint(
        gpu=device.name,
        sm_count=device.sm_count,
        memory_gib=memory,
        driver=device.driver,
        cuda=device.cuda_version,
        torch=device.torch_version,
        clocks=clocks,
        power_limit_w=device.power_limit_w,
        kind="cuda" if device.is_cuda else "cpu",
        ecc=device.ecc,
        mig=device.mig,
        cpu_threads=None if device.is_cuda else cpu_threads,
        libraries=dict(libraries or {}),
    )


def differences(baseline: Fingerprint, current: Fingerprint) -> tuple[list[str], list[str]]:
    """(blocking, informing) differences, each as ``field: baseline value -> this run's value``; a library by
    its distribution's name. What one of the two does not know (a library only one has) is no difference."""
    out: dict[str, list[str]] = {"blocking": [], "informing": []}
    for name, group in [(n, "blocking") for n in BLOCKING] + [(n, "informing") for n in INFORMING]:
        if name == "libraries":
            pairs = [(d, baseline.libraries[d], current.libraries[d])
                     for d in sorted(baseline.libraries.keys() & current.libraries.keys())]
        else:
            label = "cpu" if name == "gpu" and "cpu" in (baseline.kind, current.kind) else name  # the CPU model
            pairs = [(label, getattr(baseline, name), getattr(current, name))]
        for label, a, b in pairs:
            if a != b and not (a is None or b is None):
                out[group].append(f"{label}: {a} (baseline) -> {b} (this run)")
    return out["blocking"], out["informing"]


#: What a repeat must share with the baseline it joins: the software under test. A repeat of another build would
#: put the change into the case's run-to-run spread, and the gate would then allow it as noise.
SAME_SOFTWARE = ("cuda", "torch")


def repeat_of(baseline: Fingerprint | None, run: Fingerprint) -> Fingerprint:
    """The fingerprint a baseline keeps when ``run`` joins it as a repeat: ``run``'s, with the baseline's libraries
    (a library only the run has installed measured none of the stored repeats). Raises ValueError naming what
    differs where ``run`` measured another CUDA, torch or version of a library under test."""
    if baseline is None:
        return run
    _, informing = differences(baseline, run)
    software = [d for d in informing if d.split(":")[0] in (*SAME_SOFTWARE, *baseline.libraries)]
    if software:
        raise ValueError(f"this run measured other software than the baseline's repeats ({'; '.join(software)}): a"
                         " repeat of another build would count the change as run-to-run noise, and the gate would"
                         " then allow it. Gate this run against the baseline to see the change, or record a baseline"
                         " for this build (--attn-save-baseline); nothing saved")
    return dataclasses.replace(run, libraries=dict(baseline.libraries))
