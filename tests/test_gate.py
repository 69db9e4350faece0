"""Fingerprints, verdicts, baselines and reports, on a recorded H200 run (tests/data: four results of
the smoke profile, recorded on an H200 before fingerprints existed; its fingerprint is written in the
form this version records, and max_seqlen_k is taken from each result's attn_case)."""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest

from pytest_attn.baseline import BaselineError, load_baseline, save_baseline, stored_fingerprint
from pytest_attn.device import DeviceInfo
from pytest_attn.fingerprint import Fingerprint, differences, fingerprint_of, gpu_key
from pytest_attn.gate import Thresholds, compare, entries, parse_fraction, parse_override, regressions
from pytest_attn.reports import csv_text, markdown, terminal_lines

RECORDED = Path(__file__).parent / "data" / "h200_smoke_subset.json"
HUNYUAN = "test_prefill[flash-attn-hunyuan-video-bf16-full-fwd]"
DECODE = "test_decode[flash-attn-kvcache-qwen2.5-7b-decode-k4096-bf16-causal-fwd]"


@pytest.fixture
def run():
    return json.loads(RECORDED.read_text())


def _scale(run, name, factor, precision=None):
    out = copy.deepcopy(run)
    for b in out["benchmarks"]:
        if name in b["fullname"]:
            b["stats"]["median"] *= factor
            if precision is not None:
                b["extra_info"]["precision"] = precision
    return out


def _verdicts(base, cur, thresholds=None):
    return {c.name.split("::")[-1]: c.verdict for c in compare(base, cur, thresholds or Thresholds())}


def test_same_run_is_same(run):
    assert set(_verdicts(run, copy.deepcopy(run)).values()) == {"SAME"}


def test_slower_beyond_noise_and_faster(run):
    v = _verdicts(run, _scale(run, HUNYUAN, 1.08))  # +8 %; spreads 1.2 % + 1.2 %
    assert v[HUNYUAN] == "SLOWER" and list(v.values()).count("SAME") == 3
    assert _verdicts(run, _scale(run, DECODE, 0.9))[DECODE] == "FASTER"


def test_slower_within_noise_is_same(run):
    noisy_base = _scale(run, HUNYUAN, 1.0, precision=0.05)
    assert _verdicts(noisy_base, _scale(run, HUNYUAN, 1.08, precision=0.05))[HUNYUAN] == "SAME"  # 8 % < 10 % noise
    assert _verdicts(run, _scale(run, HUNYUAN, 1.04))[HUNYUAN] == "SAME"  # under the 5 % threshold


def test_new_and_missing(run):
    fewer = copy.deepcopy(run)
    fewer["benchmarks"] = [b for b in fewer["benchmarks"] if DECODE not in b["fullname"]]
    assert _verdicts(fewer, run)[DECODE] == "NEW"
    assert _verdicts(run, fewer)[DECODE] == "MISSING"
    assert not regressions(compare(run, fewer, Thresholds()))


def test_thresholds_per_backend_and_group(run):
    slower = _scale(run, HUNYUAN, 1.08)
    loose = Thresholds.build(0.05, [parse_override("backend:flash-attn=10%")])
    assert _verdicts(run, slower, loose)[HUNYUAN] == "SAME"
    group = next(b["group"] for b in run["benchmarks"] if HUNYUAN in b["fullname"])
    tight = Thresholds.build(0.2, [parse_override(f"group:{group}=3%")])
    assert _verdicts(run, slower, tight)[HUNYUAN] == "SLOWER"
    assert parse_fraction("5%") == parse_fraction("0.05") == 0.05
    with pytest.raises(ValueError, match="must look like backend:NAME=10%"):
        parse_override("flex=10%")
    with pytest.raises(ValueError, match="is not a number or a percentage"):
        parse_fraction("fast")


def test_spread_falls_back_to_the_iqr_without_pytest_attn_precision(run):
    plain = copy.deepcopy(run)
    for b in plain["benchmarks"]:
        del b["extra_info"]["precision"]
    e = entries(plain)[next(iter(entries(plain)))]
    b = next(x for x in plain["benchmarks"] if x["fullname"] == e.name)
    assert e.spread == pytest.approx(b["stats"]["iqr"] / 2 / b["stats"]["median"])


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


def test_a_run_with_case_objects_in_its_params_is_saved_as_pytest_benchmark_writes_it(tmp_path, run):
    # on the GPU, pytest-benchmark's run carries each test's parameters: our AttnCase objects, which plain
    # json cannot write (a first H200 run failed with "Object of type AttnCase is not JSON serializable")
    from pytest_benchmark.utils import safe_dumps

    from pytest_attn.baseline import as_written
    from pytest_attn.case import AttnCase

    case = AttnCase.dense(backend="sdpa-math", shape="tiny", batch=1, seqlen_q=4, heads_q=2, head_dim=8)
    raw = copy.deepcopy(run)
    raw["benchmarks"][0]["params"] = {"case": case}
    written = as_written(raw)
    assert written == json.loads(safe_dumps(raw))
    assert written["benchmarks"][0]["params"]["case"] == f"UNSERIALIZABLE[{case!r}]"
    path = tmp_path / "baseline.json"
    save_baseline(path, written, fingerprint_of(H200))
    assert load_baseline(path)["benchmarks"][0]["params"]["case"] == f"UNSERIALIZABLE[{case!r}]"
    save_baseline(path, raw, fingerprint_of(H200))  # the objects themselves: written as their text too
    assert load_baseline(path)["benchmarks"][0]["params"]["case"] == f"UNSERIALIZABLE[{case!r}]"


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


def test_reports(run):
    comparisons = compare(run, _scale(run, HUNYUAN, 1.08), Thresholds())
    md = markdown(comparisons, "baselines/nvidia-h200/baseline.json", ["differs from the baseline: torch: a -> b"])
    assert md.startswith("### pytest-attn: regression (1 SLOWER, 3 SAME)")
    assert f"| `{HUNYUAN}` | 399.671 ms | 431.645 ms | +8.0% | **SLOWER** | 384.7 | 38.9% |" in md
    assert "> differs from the baseline: torch: a -> b" in md
    rows = csv_text(comparisons).splitlines()
    assert rows[0].startswith("benchmark,group,backend,baseline_s,current_s,change,verdict") and len(rows) == 5
    lines = terminal_lines(comparisons, "base.json")
    assert lines[0] == "against base.json: 1 SLOWER, 3 SAME"
    assert any("moved +8.0% (threshold 5.0%, noise of both runs 2.4%)" in line for line in lines)


def test_plots_need_matplotlib(tmp_path, run, monkeypatch):
    import sys

    from pytest_attn.plots import write_plots

    monkeypatch.setitem(sys.modules, "matplotlib", None)
    assert write_plots(tmp_path, run) == [
        'plots skipped: matplotlib is not installed (pip install -e ".[plots]")']


def test_plots_are_written(tmp_path, run):
    pytest.importorskip("matplotlib")
    from pytest_attn.plots import write_plots

    written = write_plots(tmp_path / "rep", run)
    assert [Path(w).name for w in written] == ["tflops_vs_seqlen.png", "roofline.png"]
    assert all(Path(w).stat().st_size > 1000 for w in written)


def test_the_forced_json_target_works_for_both_pytest_benchmark_styles(tmp_path):
    from pytest_attn.gating import JsonSink

    sink = JsonSink(tmp_path / "run.json")
    with open(sink, mode="wb") as fh:  # pytest-benchmark 5.3: the option is a path
        fh.write(b"{}")
    assert (tmp_path / "run.json").read_bytes() == b"{}"
    with sink as fh:  # pytest-benchmark 5.2: the option is an open file, used as a context manager
        fh.write(b"[1]")
    assert (tmp_path / "run.json").read_bytes() == b"[1]" and fh.closed
    assert str(sink) == str(tmp_path / "run.json")


def test_throughput_plot_keeps_decode_steps_apart_from_prefill():
    # the committed H200 baseline: decode steps at 256-32768 keys sit two orders of magnitude below
    # prefill at the same key length; one line through both zigzagged on the first H200 report
    from pytest_attn.plots import PANELS, _points, throughput_series

    run = json.loads((Path(__file__).parents[1] / "baselines" / "nvidia-h200" / "baseline.json").read_text())
    series = throughput_series(_points(run))
    decode = {k: xy for k, xy in series.items() if k[0] == PANELS[1]}
    prefill = {k: xy for k, xy in series.items() if k[0] == PANELS[0]}
    assert ("decode and chunked prefill (seqlen_q < seqlen_k)", "sdpa-cudnn", "fwd") in decode
    assert ("prefill (seqlen_q = seqlen_k)", "flash-attn", "fwd+bwd") in prefill
    assert max(y for xy in decode.values() for _, y in xy) < 50 < min(
        y for k, xy in prefill.items() if k[2] == "fwd+bwd" for _, y in xy)
    assert sum(len(xy) for xy in series.values()) == len(run["benchmarks"])
    assert all(xy == sorted(xy) for xy in series.values())
