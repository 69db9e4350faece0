"""Stored baselines (pytest_attn.verdicts.baseline): atomic saves, the refusal to replace another GPU's
baseline, and corrupt files named and never overwritten."""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

from pytest_attn.core.device import DeviceInfo
from pytest_attn.verdicts.baseline import BaselineError, load_baseline, save_baseline, stored_fingerprint
from pytest_attn.verdicts.fingerprint import Fingerprint, fingerprint_of

RECORDED = Path(__file__).parent / "data" / "h200_smoke_subset.json"
H200 = DeviceInfo(kind="cuda", name="NVIDIA H200", torch_version="2.11.0+cu130", sm_count=132,
                  total_memory_bytes=140 << 30, driver="580.159.04", cuda_version="13.0", power_limit_w=700.0)


@pytest.fixture
def run():
    return json.loads(RECORDED.read_text())


def test_save_is_atomic_and_refuses_another_gpu(tmp_path, run, monkeypatch):
    path = tmp_path / "nvidia-h200" / "baseline.json"
    fp = fingerprint_of(H200)
    assert "saved 4 results as the baseline for NVIDIA H200" in save_baseline(path, run, fp)
    assert stored_fingerprint(load_baseline(path)) == fp
    h100 = Fingerprint("NVIDIA H100 80GB HBM3", 132, 80)
    before = path.read_text()
    with pytest.raises(BaselineError, match=r"was recorded on another GPU .*not replaced\. Pass --attn-force"):
        save_baseline(path, run, h100)
    assert path.read_text() == before
    assert "replacing the previous one" in save_baseline(path, run, h100, force=True)
    assert stored_fingerprint(load_baseline(path)) == h100

    def broken_replace(src, dst):  # a crash between writing and renaming leaves the old file whole
        raise OSError("disk full")

    monkeypatch.setattr(os, "replace", broken_replace)
    with pytest.raises(OSError, match="disk full"):
        save_baseline(path, run, h100)
    assert stored_fingerprint(load_baseline(path)) == h100
    assert [p.name for p in path.parent.iterdir()] == ["baseline.json"]  # no temporary file left


@pytest.mark.parametrize(("content", "message"), [
    ('{"benchmarks": [', r"is not valid JSON \(line 1, column 17"),
    ('{"machine_info": {}}', "has no 'benchmarks' list"),
    ('{"benchmarks": [{"name": "x", "stats": {"median": 0}}]}', "'x' has no positive stats.median"),
    ('{"benchmarks": [{"stats": {"median": 1}}]}', "benchmark #0 has no name"),
])
def test_corrupt_baselines_are_named_and_never_overwritten(tmp_path, run, content, message):
    path = tmp_path / "baseline.json"
    path.write_text(content)
    with pytest.raises(BaselineError, match=message) as info:
        load_baseline(path)
    assert str(path) in str(info.value)
    with pytest.raises(BaselineError, match="Not overwritten; pass --attn-force"):
        save_baseline(path, run, fingerprint_of(H200))
    assert path.read_text() == content
    with pytest.raises(BaselineError, match="cannot be read"):
        load_baseline(tmp_path / "missing.json")
