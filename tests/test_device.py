"""Device facts and NVML degrade to "not known", never to a crash."""

from __future__ import annotations

import sys
import types

import pytest

from pytest_attn.device import DeviceInfo, probe_device
from pytest_attn.nvml import NoNvml, PynvmlDevice, open_nvml


def fake_pynvml(fail=()):
    nv = types.SimpleNamespace(NVML_CLOCK_SM=1)

    class NVMLError(Exception):
        pass

    def maybe(name, value):
        def fn(*args):
            if name in fail:
                raise NVMLError(f"{name}: Insufficient Permissions")
            return value(*args) if callable(value) else value
        return fn

    nv.nvmlInit = maybe("init", None)
    nv.nvmlDeviceGetHandleByUUID = maybe("uuid", lambda u: ("handle", u))
    nv.nvmlDeviceGetHandleByIndex = maybe("index", lambda i: ("handle", i))
    nv.nvmlDeviceGetClockInfo = maybe("clock", 1755)
    nv.nvmlDeviceGetMaxClockInfo = maybe("max", 1980)
    nv.nvmlDeviceGetCurrentClocksEventReasons = maybe("reasons", 0x4)
    nv.nvmlSystemGetDriverVersion = maybe("driver", b"580.159.04")
    nv.nvmlDeviceGetEnforcedPowerLimit = maybe("power", 700000)
    return nv


def test_pynvml_device_reads():
    dev = PynvmlDevice(fake_pynvml(), "h")
    assert (dev.sm_clock_mhz(), dev.max_sm_clock_mhz(), dev.clocks_event_reasons()) == (1755, 1980, 4)
    assert dev.driver_version() == "580.159.04" and dev.power_limit_w() == 700.0


def test_nvml_errors_read_as_not_known():
    dev = PynvmlDevice(fake_pynvml(fail={"clock", "power", "driver"}), "h")
    assert dev.sm_clock_mhz() is None and dev.power_limit_w() is None and dev.driver_version() is None
    assert dev.max_sm_clock_mhz() == 1980


def test_open_nvml_without_the_package(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    nv = open_nvml("uuid", 0)
    assert isinstance(nv, NoNvml) and "pip install nvidia-ml-py" in nv.status
    assert nv.sm_clock_mhz() is None


def test_open_nvml_when_init_fails(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail={"init"}))
    nv = open_nvml(None, 0)
    assert isinstance(nv, NoNvml) and "NVML could not start" in nv.status


def test_open_nvml_falls_back_from_uuid_to_index(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(fail={"uuid"}))
    nv = open_nvml("abc", 3)
    assert isinstance(nv, PynvmlDevice) and nv.sm_clock_mhz() == 1755


def test_cpu_device_has_no_peak():
    dev = DeviceInfo(kind="cpu", name="x86_64", torch_version="2.x")
    peak = dev.peak("bf16")
    assert peak.datasheet_tflops is None and "CPU run" in peak.note
    assert dev.describe().startswith("CPU")
    assert dev.peak("bf16", 100.0).datasheet_tflops == 100.0


def test_gpu_device_info(fake_nvml):
    dev = DeviceInfo(kind="cuda", name="NVIDIA H200", torch_version="2.11", index=0, compute_capability=(9, 0),
                     sm_count=132, l2_bytes=60 << 20, total_memory_bytes=141 << 30, driver="580",
                     nvml=fake_nvml())
    assert dev.peak("bf16").datasheet_tflops == 989
    info = dev.as_machine_info()
    assert info["name"] == "NVIDIA H200" and info["compute_capability"] == "9.0" and info["sm_count"] == 132
    assert "sm90, 132 SMs" in dev.describe()


def test_probe_without_a_gpu_is_a_cpu_device():
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this test describes a machine without a GPU")
    dev = probe_device()
    assert dev.kind == "cpu" and not dev.is_cuda and dev.torch_version == torch.__version__
