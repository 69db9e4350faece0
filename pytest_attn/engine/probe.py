"""Reads the device a session measures on from CUDA and NVML: the only place that asks torch which
GPU this is. It runs when a test first needs the device, never at import or collection. For CPU runs,
what this host can do: its free memory and its matrix-product rate, to refuse work that would not
finish in reasonable time before it starts."""

from __future__ import annotations

import importlib.util
import os
import platform
import sys
import time
from collections.abc import Callable
from pathlib import Path

from ..core.device import DeviceInfo
from ..core.layouts import torch_dtype
from .nvml import NoNvml, Nvml, open_nvml


def probe_device(nvml_factory: Callable[[str | None, int], Nvml] = open_nvml) -> tuple[DeviceInfo, Nvml]:
    """The current CUDA device (or the CPU when there is none) and NVML's readings of it."""
    import torch

    if not torch.cuda.is_available():
        cpu = DeviceInfo(kind="cpu", name=cpu_model(), torch_version=str(torch.__version__))
        return cpu, NoNvml("no GPU")
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    uuid = str(getattr(props, "uuid", "") or "") or None
    nvml = nvml_factory(uuid, index)
    info = DeviceInfo(
        kind="cuda",
        name=props.name,
        torch_version=str(torch.__version__),
        index=index,
        compute_capability=(props.major, props.minor),
        sm_count=props.multi_processor_count,
        l2_bytes=int(getattr(props, "L2_cache_size", 0)) or None,
        total_memory_bytes=props.total_memory,
        driver=nvml.driver_version(),
        cuda_version=torch.version.cuda,
        max_sm_clock_mhz=nvml.max_sm_clock_mhz(),
        power_limit_w=nvml.power_limit_w(),
        nvml_status=nvml.status,
        uuid=f"GPU-{uuid}" if uuid and not uuid.startswith(("GPU-", "MIG-")) else uuid,
        ecc=nvml.ecc_mode(),
        mig=nvml.mig_mode(),
    )
    return info, nvml


def cpu_model(cpuinfo: Path = Path("/proc/cpuinfo")) -> str:
    """This CPU's model name (Linux ``model name``), else what ``platform`` says: CPU baselines are keyed
    by it, as GPU ones are by the GPU's name."""
    try:
        for line in cpuinfo.read_text().splitlines():
            if line.startswith("model name") and ":" in line:
                return " ".join(line.split(":", 1)[1].split())
    except OSError:
        pass
    return platform.processor() or platform.machine() or "unknown CPU"


def process_age_s(stat: Path = Path("/proc/self/stat"), uptime: Path = Path("/proc/uptime")) -> float | None:
    """Seconds since this process started (Linux's /proc; None elsewhere): the start-up before pytest
    loaded the plugin -- the interpreter, pytest, the plugins -- that a run's wall time includes."""
    import os

    try:
        started_ticks = int(stat.read_text().rsplit(")", 1)[1].split()[19])  # field 22, starttime
        up_s = float(uptime.read_text().split()[0])
        return max(0.0, up_s - started_ticks / os.sysconf("SC_CLK_TCK"))
    except (OSError, ValueError, IndexError):
        return None


def host_free_bytes(meminfo: Path = Path("/proc/meminfo")) -> int | None:
    """The host memory available to a new allocation (Linux ``MemAvailable``), or None where unknown."""
    try:
        for line in meminfo.read_text().splitlines():
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    except (OSError, ValueError, IndexError):
        return None
    return None


def cpu_gflops(dtypes: tuple[str, ...] = ("fp32", "bf16", "fp16"), n: int = 256, reps: int = 5) -> dict[str, float]:
    """This CPU's matrix-product rate per dtype through torch (best of ``reps``, a few milliseconds)."""
    import torch

    rates = {}
    for dtype in dtypes:
        a = torch.randn(n, n).to(torch_dtype(dtype))
        b = torch.randn(n, n).to(torch_dtype(dtype))
        a @ b  # warm
        best = float("inf")
        for _ in range(reps):
            t0 = time.perf_counter()
            a @ b
            best = min(best, time.perf_counter() - t0)
        rates[dtype] = 2 * n**3 / best / 1e9
    return rates


def uncompiled_bytecode(dont_write: bool | None = None, origin: str | None = "", exists: Callable[[str], bool]
                        = os.path.exists) -> str | None:
    """Why start-up is slow where Python keeps no bytecode: it writes none (``PYTHONDONTWRITEBYTECODE``, ``-B``)
    and finds none for torch, so every process compiles torch and the libraries from source. None where it
    keeps some. The defaults read this interpreter and torch's install (found, not imported)."""
    if dont_write is None:
        dont_write = sys.dont_write_bytecode
    if origin == "":
        spec = importlib.util.find_spec("torch")
        origin = spec.origin if spec is not None else None
    if not dont_write or not origin or exists(importlib.util.cache_from_source(origin)):
        return None
    # the smoke profile on 2 x H200: start-up 14.0 s, 4.5 s with a bytecode cache (docs/gpu-validation.md)
    return ("start-up: Python writes no bytecode here (PYTHONDONTWRITEBYTECODE or -B) and found none for torch, so"
            " every process of this run compiled torch and the libraries from source (10 s or more, paid again by"
            " each -n worker): unset PYTHONDONTWRITEBYTECODE, and where the install cannot be written set"
            " PYTHONPYCACHEPREFIX to a folder that can")
