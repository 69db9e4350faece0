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
    epyc, xeon = (Fingerprint(name, 2, 24, kind="cpu") for name in ("AMD EPYC 9654", "Intel Xeon 8480"))
    assert differences(epyc, xeon)[0] == ["cpu: AMD EPYC 9654 (baseline) -> Intel Xeon 8480 (this run)"]
    base = Fingerprint("NVIDIA H200", 132, 140, driver="580.159.04",
                       libraries={"flash-attn": "2.8.3", "flash-attn-4": "4.0.0b36"})
    newer = Fingerprint("NVIDIA H200", 132, 140, driver="590.1",
                        libraries={"flash-attn": "2.8.4", "flash-attn-4": "4.0.0"})
    assert differences(base, newer) == ([], ["driver: 580.159.04 (baseline) -> 590.1 (this run)",
                                             "flash-attn: 2.8.3 (baseline) -> 2.8.4 (this run)",
                                             "flash-attn-4: 4.0.0b36 (baseline) -> 4.0.0 (this run)"])
    assert Fingerprint.from_dict(fp.as_dict()) == fp
    with pytest.raises(ValueError, match="needs a non-empty 'gpu' entry"):
        Fingerprint.from_dict({"sm_count": 1})
    with pytest.raises(ValueError, match="needs a non-empty 'gpu' entry"):
        Fingerprint.from_dict({"gpu": " "})


def test_a_cpu_run_is_keyed_by_its_model_and_never_compared_with_a_gpu():
    cpu = DeviceInfo(kind="cpu", name="AMD EPYC", torch_version="2.13.0+cpu")
    fp = fingerprint_of(cpu, cpu_threads="1 (auto)")
    assert (fp.key, fp.device, fp.kind, fp.cpu_threads) == ("cpu-amd-epyc", "CPU AMD EPYC", "cpu", "1 (auto)")
    blocking, _ = differences(fingerprint_of(H200), fp)
    assert "kind: cuda (baseline) -> cpu (this run)" in blocking
    assert Fingerprint.from_dict(fp.as_dict()) == fp


def test_ecc_and_mig_are_named_when_they_differ():
    on = fingerprint_of(DeviceInfo(kind="cuda", name="NVIDIA H200", torch_version="t", ecc="on", mig="off"))
    off = fingerprint_of(DeviceInfo(kind="cuda", name="NVIDIA H200", torch_version="t", ecc="off", mig="on"))
    assert differences(on, off) == ([], ["ecc: on (baseline) -> off (this run)",
                                         "mig: off (baseline) -> on (this run)"])
