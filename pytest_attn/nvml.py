"""NVML behind a small interface: the real one (``pynvml`` from nvidia-ml-py) and a null one.

Every read returns None when NVML, the driver or the device cannot answer: a missing NVML degrades
figures to "not known", it never fails a run. Tests use a fake with the same methods.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

T = TypeVar("T")


class Nvml(Protocol):
    """What pytest-attn reads from NVML for one device."""

    @property
    def status(self) -> str: ...  # "ok" or why NVML is not available

    def sm_clock_mhz(self) -> int | None: ...

    def max_sm_clock_mhz(self) -> int | None: ...

    def clocks_event_reasons(self) -> int | None: ...

    def driver_version(self) -> str | None: ...

    def power_limit_w(self) -> float | None: ...


class NoNvml:
    """Stands in when NVML cannot be used; says why."""

    def __init__(self, why: str) -> None:
        self.status = why

    def sm_clock_mhz(self) -> int | None:
        return None

    def max_sm_clock_mhz(self) -> int | None:
        return None

    def clocks_event_reasons(self) -> int | None:
        return None

    def driver_version(self) -> str | None:
        return None

    def power_limit_w(self) -> float | None:
        return None


class PynvmlDevice:
    """One device through ``pynvml``; construct with :func:`open_nvml`."""

    status = "ok"

    def __init__(self, pynvml: Any, handle: Any) -> None:
        self._nv = pynvml
        self._h = handle

    def _read(self, fn: Callable[[], T]) -> T | None:
        try:
            return fn()
        except Exception:  # NVML raises NVMLError subclasses; any failure means "not known"
            return None

    def sm_clock_mhz(self) -> int | None:
        return self._read(lambda: int(self._nv.nvmlDeviceGetClockInfo(self._h, self._nv.NVML_CLOCK_SM)))

    def max_sm_clock_mhz(self) -> int | None:
        return self._read(lambda: int(self._nv.nvmlDeviceGetMaxClockInfo(self._h, self._nv.NVML_CLOCK_SM)))

    def clocks_event_reasons(self) -> int | None:
        getter = getattr(self._nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            self._nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        if getter is None:
            return None
        return self._read(lambda: int(getter(self._h)))

    def driver_version(self) -> str | None:
        def read() -> str:
            v = self._nv.nvmlSystemGetDriverVersion()
            return v.decode() if isinstance(v, bytes) else str(v)

        return self._read(read)

    def power_limit_w(self) -> float | None:
        return self._read(lambda: self._nv.nvmlDeviceGetEnforcedPowerLimit(self._h) / 1000.0)


def open_nvml(uuid: str | None, index: int) -> Nvml:
    """NVML for the CUDA device with this UUID (index as fallback); never raises."""
    try:
        import pynvml
    except ImportError:
        return NoNvml("nvidia-ml-py (pynvml) is not installed: pip install nvidia-ml-py")
    try:
        pynvml.nvmlInit()
    except Exception as exc:
        return NoNvml(f"NVML could not start ({exc}); clocks are not known")
    handle = None
    if uuid:
        # torch reports the UUID without NVML's "GPU-" prefix
        for candidate in (uuid, f"GPU-{uuid}"):
            try:
                handle = pynvml.nvmlDeviceGetHandleByUUID(candidate)
                break
            except Exception:
                continue
    if handle is None:
        try:
            handle = pynvml.nvmlDeviceGetHandleByIndex(index)
        except Exception as exc:
            return NoNvml(f"NVML has no device {index} ({exc}); clocks are not known")
    return PynvmlDevice(pynvml, handle)


def visible_device() -> tuple[Any, Any, str] | None:
    """(pynvml, handle, name) of the first GPU this process may use (``CUDA_VISIBLE_DEVICES``: an index
    or a UUID), through NVML only -- no CUDA context is created -- or None without a GPU or NVML."""
    import os

    try:
        import pynvml

        pynvml.nvmlInit()
        first = os.environ.get("CUDA_VISIBLE_DEVICES", "0").split(",")[0].strip()
        if first in ("", "-1"):
            return None
        if first.isdigit():
            handle = pynvml.nvmlDeviceGetHandleByIndex(int(first))
        else:
            handle = pynvml.nvmlDeviceGetHandleByUUID(first if first.startswith(("GPU-", "MIG-")) else f"GPU-{first}")
        name = pynvml.nvmlDeviceGetName(handle)
        return pynvml, handle, name.decode() if isinstance(name, bytes) else str(name)
    except Exception:
        return None
