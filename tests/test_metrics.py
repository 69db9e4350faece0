"""Figures of a result and its share of the measured ceilings (pytest_attn.core.metrics). Pure."""

from __future__ import annotations

import pytest

from pytest_attn.core.device import DeviceInfo
from pytest_attn.core.flops import Work
from pytest_attn.core.metrics import Ceilings, CeilingShare, ceiling_share, figures
from pytest_attn.core.peaks import peak_for
from pytest_attn.engine.ceilings import CeilingCache


def test_figures_mfu_both_ways_and_bound():
    work = Work(flops=989 * 10**12, fa2_flops=989 * 10**12, min_bytes=10**9, visible_pairs=1, total_pairs=1)
    p = peak_for("NVIDIA H200", (9, 0), 132, "bf16")
    f = figures(work, 2.0, p, sm_clock_mhz=1650)  # 494.5 TFLOP/s
    assert f.tflops == pytest.approx(494.5)
    assert f.mfu_datasheet == pytest.approx(0.5)
    assert f.mfu_at_clock == pytest.approx(494.5 / 892.1, rel=1e-3)
    assert f.tbps == pytest.approx(0.0005)
    assert f.ridge_intensity == pytest.approx(989 / 4.8)
    assert f.bound == "compute"
    small = Work(flops=10**9, fa2_flops=10**9, min_bytes=10**8, visible_pairs=1, total_pairs=1)
    assert figures(small, 1e-3, p, None).bound == "memory"
    assert figures(small, 1e-3, p, None).mfu_at_clock is None
    with pytest.raises(ValueError, match="median_s"):
        figures(small, 0.0, p, None)


def test_ceiling_fractions():
    c = Ceilings({"bf16": 750.0}, 4.0)
    assert ceiling_share(600.0, 1.0, "bf16", c) == CeilingShare(750.0, 0.8, 4.0, 0.25)
    assert ceiling_share(600.0, 1.0, "bf16", c).of_bound("compute") == 0.8
    assert ceiling_share(600.0, 1.0, "bf16", c).of_bound("memory") == 0.25
    assert ceiling_share(600.0, 1.0, "fp16", c).fraction_of_matmul is None  # not measured for fp16
    assert ceiling_share(1.0, 1.0, "bf16", None).fraction_of_copy is None
    assert c.describe() == "measured ceilings: bf16 matmul 750.0 TFLOP/s, copy 4.00 TB/s"
    cpu = DeviceInfo(kind="cpu", name="cpu", torch_version="x")
    assert CeilingCache().get(cpu, "bf16") is None  # nothing measured without a GPU
    assert CeilingCache().measured(None) is None
