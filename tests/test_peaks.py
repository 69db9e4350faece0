from __future__ import annotations

import pytest

from pytest_attn.core.peaks import lookup, peak_for


@pytest.mark.parametrize(
    ("name", "label"),
    [
        ("NVIDIA H100 80GB HBM3", "H100 SXM / H800"),
        ("NVIDIA H100 PCIe", "H100 PCIe"),
        ("NVIDIA H100 NVL", "H100 NVL"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA H20", "H20"),
        ("NVIDIA A100-SXM4-80GB", "A100 80GB"),
        ("NVIDIA A100-PCIE-40GB", "A100 / A800"),
        ("NVIDIA GeForce RTX 4090", "RTX 4090"),
        ("NVIDIA L4", "L4"),
        ("NVIDIA L40S", "L40S"),
        ("NVIDIA GB200", "GB200"),
        ("NVIDIA B200", "B200"),
    ],
)
def test_lookup_by_driver_name(name, label):
    spec = lookup(name)
    assert spec is not None and spec.label == label


def test_h200_datasheet_and_clock_aware():
    p = peak_for("NVIDIA H200", (9, 0), 132, "bf16")
    assert p.datasheet_tflops == 989
    assert p.at_clock_tflops(1830) == pytest.approx(132 * 4096 * 1830e6 / 1e12)  # 989.4
    assert p.at_clock_tflops(1650) == pytest.approx(892.1, abs=0.1)
    assert p.mem_tbps == 4.8
    assert peak_for("NVIDIA H200", (9, 0), 132, "fp8").at_clock_tflops(1830) == pytest.approx(1978.8, abs=0.1)


def test_rtx4090_fp32_accumulate_rate():
    p = peak_for("NVIDIA GeForce RTX 4090", (8, 9), 128, "fp16")
    assert p.datasheet_tflops == 165.2
    assert p.at_clock_tflops(2520) == pytest.approx(165.2, abs=0.1)
    assert p.at_clock_tflops(2790) > p.datasheet_tflops  # boosting above spec: visible, not hidden


def test_capped_part_has_no_clock_aware_peak():
    p = peak_for("NVIDIA H20", (9, 0), 78, "bf16")
    assert p.datasheet_tflops == 148 and p.at_clock_tflops(1980) is None
    assert "capped part" in p.note


def test_unknown_gpu_is_na_with_a_hint():
    p = peak_for("NVIDIA Mystery 9000", (12, 0), 100, "bf16")
    assert p.datasheet_tflops is None and p.at_clock_tflops(2000) is None
    assert "--attn-peak-tflops" in p.note


def test_unknown_name_of_a_known_arch_still_gets_a_clock_aware_peak():
    p = peak_for("NVIDIA GH200 480GB", (9, 0), 132, "bf16")
    assert p.datasheet_tflops is None
    assert p.at_clock_tflops(1980) == pytest.approx(132 * 4096 * 1.98e9 / 1e12)


def test_user_peak_overrides_the_datasheet():
    p = peak_for("NVIDIA Mystery 9000", None, None, "bf16", override_tflops=500.0)
    assert p.datasheet_tflops == 500.0 and p.source == "--attn-peak-tflops"


def test_fp32_has_no_tensor_core_peak():
    p = peak_for("NVIDIA H200", (9, 0), 132, "fp32")
    assert p.datasheet_tflops is None and "fp32" in p.note
