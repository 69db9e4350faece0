"""NVML behind a small interface: the one place that imports ``pynvml`` (nvidia-ml-py) and starts it.

:func:`open_nvml` gives the readings of one device (:class:`Nvml`: clocks, clocks-event reasons,
driver, power limit), :func:`visible_devices` the GPUs this process may use, in the order of
``CUDA_VISIBLE_DEVICES``, without creating a CUDA context. Every read returns None when NVML, the
driver or the device cannot answer: a missing NVML degrades figures to "not known", it never fails a
run. Tests use a fake with the same methods.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
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

    def ecc_mode(self) -> str | None: ...  # "on" or "off"

    def mig_mode(self) -> str | None: ...  # "on" or "off"

    def power_w(self) -> float | None: ...  # the board's power draw now

    def energy_mj(self) -> int | None: ...  # the energy counter: millijoules since the driver loaded


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

    def ecc_mode(self) -> str | None:
        return None

    def mig_mode(self) -> str | None:
        return None

    def power_w(self) -> float | None:
        return None

    def energy_mj(self) -> int | None:
        return None


def read(fn: Callable[[], T]) -> T | None:
    """``fn()``, or None when NVML raises (NVMLError subclasses: "not known", never a failure)."""
    try:
        return fn()
    except Exception:
        return None


class PynvmlDevice:
    """One device through ``pynvml``; construct with :func:`open_nvml`."""

    status = "ok"

    def __init__(self, pynvml: Any, handle: Any) -> None:
        self.nv = pynvml
        self.handle = handle

    def sm_clock_mhz(self) -> int | None:
        return read(lambda: int(self.nv.nvmlDeviceGetClockInfo(self.handle, self.nv.NVML_CLOCK_SM)))

    def max_sm_clock_mhz(self) -> int | None:
        return read(lambda: int(self.nv.nvmlDeviceGetMaxClockInfo(self.handle, self.nv.NVML_CLOCK_SM)))

    def base_clock_mhz(self) -> int | None:
        return read(lambda: int(self.nv.nvmlDeviceGetDefaultApplicationsClock(self.handle, self.nv.NVML_CLOCK_SM)))

    def clocks_event_reasons(self) -> int | None:
        getter = getattr(self.nv, "nvmlDeviceGetCurrentClocksEventReasons", None) or getattr(
            self.nv, "nvmlDeviceGetCurrentClocksThrottleReasons", None
        )
        if getter is None:
            return None
        return read(lambda: int(getter(self.handle)))

    def driver_version(self) -> str | None:
        return read(lambda: _text(self.nv.nvmlSystemGetDriverVersion()))

    def power_limit_w(self) -> float | None:
        return read(lambda: self.nv.nvmlDeviceGetEnforcedPowerLimit(self.handle) / 1000.0)

    def ecc_mode(self) -> str | None:
        """The current ECC mode (nvmlDeviceGetEccMode gives current and pending)."""
        return read(lambda: "on" if self.nv.nvmlDeviceGetEccMode(self.handle)[0] else "off")

    def mig_mode(self) -> str | None:
        """The current MIG mode (nvmlDeviceGetMigMode gives current and pending); None on GPUs without MIG."""
        return read(lambda: "on" if self.nv.nvmlDeviceGetMigMode(self.handle)[0] else "off")

    def power_w(self) -> float | None:
        """The power draw now (nvmlDeviceGetPowerUsage, milliwatts)."""
        return read(lambda: self.nv.nvmlDeviceGetPowerUsage(self.handle) / 1000.0)

    def energy_mj(self) -> int | None:
        """Energy since the driver loaded (nvmlDeviceGetTotalEnergyConsumption, millijoules; Volta and newer)."""
        return read(lambda: int(self.nv.nvmlDeviceGetTotalEnergyConsumption(self.handle)))


def _text(value: Any) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)


def _started() -> Any:
    """``pynvml``, initialised; raises ImportError or NVML's error when it cannot be."""
    import pynvml

    pynvml.nvmlInit()
    return pynvml


def _handle(pynvml: Any, ident: str) -> Any:
    """A device handle for an index (``"0"``) or a UUID (``"GPU-..."``, ``"MIG-..."`` or bare, as torch
    reports it)."""
    if ident.isdigit():
        return pynvml.nvmlDeviceGetHandleByIndex(int(ident))
    return pynvml.nvmlDeviceGetHandleByUUID(ident if ident.startswith(("GPU-", "MIG-")) else f"GPU-{ident}")


def open_nvml(uuid: str | None, index: int) -> Nvml:
    """NVML for the CUDA device with this UUID (index as fallback); never raises."""
    try:
        pynvml = _started()
    except ImportError:
        return NoNvml("nvidia-ml-py (pynvml) is not installed: pip install nvidia-ml-py")
    except Exception as exc:
        return NoNvml(f"NVML could not start ({exc}); clocks are not known")
    for ident in ([uuid] if uuid else []) + [str(index)]:
        try:
            return PynvmlDevice(pynvml, _handle(pynvml, ident))
        except Exception as exc:
            why = exc
    return NoNvml(f"NVML has no device {index} ({why}); clocks are not known")


@dataclass(frozen=True)
class VisibleGpu:
    """A GPU this process may use: its index among the visible ones, NVML's UUID and name."""

    index: int
    uuid: str
    name: str
    device: PynvmlDevice


def visible_devices(env: dict[str, str] | None = None) -> list[VisibleGpu]:
    """The GPUs this process may use, in ``CUDA_VISIBLE_DEVICES`` order (indices or UUIDs), through NVML
    only -- no CUDA context is created; [] without a GPU or NVML."""
    env = dict(os.environ) if env is None else env
    try:
        pynvml = _started()
        listed = env.get("CUDA_VISIBLE_DEVICES")
        if listed is None:
            idents = [str(i) for i in range(pynvml.nvmlDeviceGetCount())]
        else:
            idents = []
            for part in (p.strip() for p in listed.split(",")):
                if not part or part.startswith("-"):
                    break  # CUDA stops at the first invalid entry
                idents.append(part)
        out = []
        for i, ident in enumerate(idents):
            handle = _handle(pynvml, ident)
            uuid = _text(pynvml.nvmlDeviceGetUUID(handle))
            out.append(VisibleGpu(i, uuid, _text(pynvml.nvmlDeviceGetName(handle)), PynvmlDevice(pynvml, handle)))
        return out
    except Exception:
        return []
