"""Device facts (pytest_attn.core.device): peaks, machine info and the description."""

from __future__ import annotations

from pytest_attn.core.device import DeviceInfo


def test_cpu_device_has_no_peak():
    dev = DeviceInfo(kind="cpu", name="x86_64", torch_version="2.x")
    peak = dev.peak("bf16")
    assert peak.datasheet_tflops is None and "CPU run" in peak.note
    assert dev.describe().startswith("CPU")
    assert dev.peak("bf16", 100.0).datasheet_tflops == 100.0


def test_gpu_device_info():
    dev = DeviceInfo(kind="cuda", name="NVIDIA H200", torch_version="2.11", index=0, compute_capability=(9, 0),
                     sm_count=132, l2_bytes=60 << 20, total_memory_bytes=141 << 30, driver="580")
    assert dev.peak("bf16").datasheet_tflops == 989
    info = dev.as_machine_info()
    assert info["name"] == "NVIDIA H200" and info["compute_capability"] == "9.0" and info["sm_count"] == 132
    assert "sm90, 132 SMs" in dev.describe()
