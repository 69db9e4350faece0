"""NVML (pytest_attn.engine.nvml) degrades to "not known", never to a crash; the probe describes the
device without one."""

from __future__ import annotations

import sys
import types

import pytest

from pytest_attn.engine.nvml import NoNvml, PynvmlDevice, open_nvml, visible_devices
from pytest_attn.engine.probe import probe_device


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
    nv.nvmlDeviceGetCount = maybe("count", 2)
    nv.nvmlDeviceGetUUID = maybe("getuuid", lambda h: f"GPU-{h[1]}" if not str(h[1]).startswith("GPU-") else h[1])
    nv.nvmlDeviceGetName = maybe("name", b"NVIDIA H200")
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


def test_visible_devices_follow_cuda_visible_devices(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml())
    every = visible_devices(env={})
    assert [(g.index, g.uuid) for g in every] == [(0, "GPU-0"), (1, "GPU-1")]
    assert [g.uuid for g in visible_devices(env={"CUDA_VISIBLE_DEVICES": "1"})] == ["GPU-1"]
    by_uuid = visible_devices(env={"CUDA_VISIBLE_DEVICES": "GPU-aaaa,bbbb"})
    assert [(g.index, g.uuid, g.name) for g in by_uuid] == [(0, "GPU-aaaa", "NVIDIA H200"), (1, "GPU-bbbb",
                                                                                          "NVIDIA H200")]
    assert visible_devices(env={"CUDA_VISIBLE_DEVICES": ""}) == []
    assert [g.uuid for g in visible_devices(env={"CUDA_VISIBLE_DEVICES": "0,-1,1"})] == ["GPU-0"]  # CUDA stops at -1


def test_visible_devices_without_nvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)
    assert visible_devices(env={}) == []


def test_probe_without_a_gpu_is_a_cpu_device():
    pytest.importorskip("torch")
    import torch

    if torch.cuda.is_available():
        pytest.skip("this test describes a machine without a GPU")
    dev, nvml = probe_device()
    assert isinstance(nvml, NoNvml) and dev.kind == "cpu" and not dev.is_cuda and dev.torch_version == torch.__version__
