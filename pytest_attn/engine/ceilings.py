"""Measured ceilings: what this GPU actually reaches on a large matrix product (per dtype) and on a
device-to-device copy, measured once per session and device. Each case reports its share of them
(:func:`pytest_attn.core.metrics.ceiling_share`) beside its fraction of the datasheet, and the roofline
plot uses them. GPU I/O."""

from __future__ import annotations

from typing import Any

from ..core.device import DeviceInfo
from ..core.layouts import torch_dtype
from ..core.metrics import Ceilings
from .inputs import torch_device
from .profiler import events_seconds

MATMUL_N = 8192
COPY_BYTES = 2 << 30


def measure_matmul(dtype: str, device: Any, n: int = MATMUL_N, reps: int = 20) -> float:
    """TFLOP/s of an n x n x n matrix product in ``dtype`` (best of three timed runs). GPU I/O."""
    import torch

    a = torch.randn(n, n, device=device, dtype=torch_dtype(dtype))
    b = torch.randn(n, n, device=device, dtype=torch_dtype(dtype))
    best = min(events_seconds(lambda: a @ b, reps) for _ in range(3))
    return 2 * n**3 * reps / best / 1e12


def measure_copy(device: Any, nbytes: int = COPY_BYTES, reps: int = 10) -> float:
    """TB/s of a device-to-device copy, counting bytes read and written (best of three). GPU I/O."""
    import torch

    src = torch.empty(nbytes, dtype=torch.uint8, device=device)
    dst = torch.empty_like(src)
    best = min(events_seconds(lambda: dst.copy_(src), reps) for _ in range(3))
    return 2 * nbytes * reps / best / 1e12


class CeilingCache:
    """Ceilings per device, measured on first use (matmul per dtype)."""

    def __init__(self) -> None:
        self._by_device: dict[str, Ceilings] = {}
        self.failed: dict[str, str] = {}  # what could not be measured, and why

    def lines(self) -> list[str]:
        out = [f"{key.split(':')[0]}: {c.describe()}" for key, c in self._by_device.items()]
        return out + [f"ceiling not measured ({what}): {why}" for what, why in self.failed.items()]

    @staticmethod
    def _key(device_info: DeviceInfo) -> str:
        return f"{device_info.name}:{device_info.index or 0}"

    def measured(self, device_info: DeviceInfo | None) -> Ceilings | None:
        """What was measured on this device so far (nothing new is measured)."""
        if device_info is None or not device_info.is_cuda:
            return None
        return self._by_device.get(self._key(device_info))

    def get(self, device_info: DeviceInfo, dtype: str) -> Ceilings | None:
        if not device_info.is_cuda:
            return None
        import torch

        ceilings = self._by_device.setdefault(self._key(device_info), Ceilings())
        dev = torch_device(device_info)
        try:  # a diagnostic: if it cannot be measured (memory, an odd GPU), the case still stands
            if dtype in ("fp16", "bf16") and dtype not in ceilings.matmul_tflops and dtype not in self.failed:
                ceilings.matmul_tflops[dtype] = measure_matmul(dtype, dev)
            if ceilings.copy_tbps is None and "copy" not in self.failed:
                ceilings.copy_tbps = measure_copy(dev)
        except Exception as exc:
            self.failed[dtype if dtype not in ceilings.matmul_tflops else "copy"] = f"{type(exc).__name__}: {exc}"
        finally:
            torch.cuda.empty_cache()
        return ceilings
