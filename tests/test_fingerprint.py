"""What a run was measured on, and whether two may be compared (pytest_attn.verdicts.fingerprint)."""

from __future__ import annotations

import pytest

from pytest_attn.core.device import DeviceInfo
from pytest_attn.verdicts.fingerprint import Fingerprint, differences, fingerprint_of, gpu_key

H200 = DeviceInfo(kind="cuda", name="NVIDIA H200", torch_version="2.11.0+cu130", sm_count=132,
                  total_memory_bytes=140 << 30, driver="580.159.04", cuda_version="13.0", power_limit_w=700.0)


def test_fingerprints():
    fp = fingerprint_of(H200)
    assert (fp.gpu, fp.sm_count, fp.memory_gib, fp.key) == ("NVIDIA H200", 132, 140, "nvidia-h200")
    assert gpu_key("NVIDIA H100 80GB HBM3") == "nvidia-h100-80gb-hbm3"
    h100 = Fingerprint("NVIDIA H100 80GB HBM3", 132, 80, driver="580.159.04")
    blocking, _ = differences(fp, h100)
    assert blocking == ["gpu: NVIDIA H200 (baseline) -> NVIDIA H100 80GB HBM3 (this run)",
                        "memory_gib: 140 (baseline) -> 80 (this run)"]
    base = Fingerprint("NVIDIA H200", 132, 140, driver="580.159.04", flash_attn="2.8.3")
    newer = Fingerprint("NVIDIA H200", 132, 140, driver="590.1", flash_attn="2.8.4")
    assert differences(base, newer) == ([], ["driver: 580.159.04 (baseline) -> 590.1 (this run)",
                                             "flash_attn: 2.8.3 (baseline) -> 2.8.4 (this run)"])
    assert Fingerprint.from_dict(fp.as_dict()) == fp
    with pytest.raises(ValueError, match="needs at least a 'gpu'"):
        Fingerprint.from_dict({"sm_count": 1})
