"""Reads the device a session measures on from CUDA and NVML: the only place that asks torch which
GPU this is. It runs when a test first needs the device, never at import or collection."""

from __future__ import annotations

import platform
from collections.abc import Callable

from ..core.device import DeviceInfo
from .nvml import NoNvml, Nvml, open_nvml


def probe_device(nvml_factory: Callable[[str | None, int], Nvml] = open_nvml) -> tuple[DeviceInfo, Nvml]:
    """The current CUDA device (or the CPU when there is none) and NVML's readings of it."""
    import torch

    if not torch.cuda.is_available():
        cpu = DeviceInfo(kind="cpu", name=platform.processor() or platform.machine(), torch_version=torch.__version__)
        return cpu, NoNvml("no GPU")
    index = torch.cuda.current_device()
    props = torch.cuda.get_device_properties(index)
    uuid = str(getattr(props, "uuid", "") or "") or None
    nvml = nvml_factory(uuid, index)
    info = DeviceInfo(
        kind="cuda",
        name=props.name,
        torch_version=torch.__version__,
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
    )
    return info, nvml
