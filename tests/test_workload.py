"""The workload file (format, version, a loader with errors for people), its records as cases, and the command
that runs a script under capture."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

from pytest_attn.capture.command import main
from pytest_attn.core.case import Mask
from pytest_attn.core.replay import record_variant, replay, replay_file
from pytest_attn.core.workload import (
    FORMAT,
    VERSION,
    Call,
    Workload,
    WorkloadError,
    WorkloadRecord,
    dumps,
    from_json,
    load_workload,
    to_json,
)

PREFILL = Call("sdpa", 2, 128, 128, 32, 8, 128, 128, "bf16", "causal", is_causal=True, enable_gqa=True)
DECODE = Call("sdpa", 2, 1, 129, 32, 8, 128, 128, "bf16", enable_gqa=True)
PADDED = Call("sdpa", 2, 7, 7, 4, 4, 16, 16, "fp32", "padding", (-1, 0), 0.4, (7, 4), (7, 4))
PAGED = Call("flash_attn_with_kvcache", 3, 1, 41, 8, 2, 32, 32, "bf16", "causal", seqlens_k=(6, 41, 18),
             page_size=16, kv_cache=True, append=1, is_causal=True)
DROPOUT = Call("sdpa", 1, 8, 8, 4, 4, 16, 16, "fp32", unsupported="dropout_p=0.5: ...")


def workload(*calls: Call) -> Workload:
    return Workload("llama", tuple(WorkloadRecord(c, 2, i, ("model.layers.0.self_attn",)) for i, c in enumerate(calls)))


def test_a_workload_reads_back_as_it_was_written():
    w = workload(PREFILL, DECODE, PADDED, PAGED, DROPOUT)
    data = json.loads(json.dumps(to_json(w)))
    assert (data["format"], data["version"]) == (FORMAT, VERSION)
    assert from_json(data) == w


def test_a_file_from_a_newer_version_is_refused_naming_both_versions(tmp_path):
    path = tmp_path / "new.workload.json"
    path.write_text(json.dumps({**to_json(workload(PREFILL)), "version": VERSION + 1}))
    with pytest.raises(WorkloadError, match=rf"version {VERSION + 1}; this pytest-attn reads version {VERSION} and"
                                            r" older: upgrade pytest-attn"):
        load_workload(path)


@pytest.mark.parametrize(("change", "message"), [
    ({"heads": 0}, "record 0: heads=0 must be a positive integer"),
    ({"mask": "diagonal"}, "record 0: mask='diagonal' must be one of none, causal"),
    ({"colour": 1}, "record 0: unknown field"),
    ({"count": -1}, "record 0: count=-1 must be a positive integer"),
])
def test_a_bad_record_is_named_with_its_field(change, message):
    data = json.loads(json.dumps(to_json(workload(PREFILL))))
    data["records"][0].update(change)
    with pytest.raises(WorkloadError, match=message):
        from_json(data, "w.json")


def test_not_a_workload_and_a_missing_file_say_what_to_do(tmp_path):
    with pytest.raises(WorkloadError, match=r"not a pytest-attn workload.*python -m pytest_attn.capture"):
        from_json({"benchmarks": []})
    with pytest.raises(WorkloadError, match=r"no workload file 'gone.json' \(looked from .*\); give a file or a"
                                            r" shipped workload's name \(hunyuan-video-dit, llama3-8b, qwen2.5-7b\)"):
        replay_file("gone.json")


def test_a_shipped_workload_is_replayed_by_its_name(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    r = replay_file("hunyuan-video-dit")
    assert (r.origin, r.workload.name, len(r.variants)) == ("hunyuan-video-dit", "hunyuan-video-dit", 1)
    (tmp_path / "hunyuan-video-dit").write_text(dumps(Workload("mine", ())))  # a file of that name comes first
    assert replay_file("hunyuan-video-dit").workload.name == "mine"


def test_records_become_cases_of_their_suites():
    w = workload(PREFILL, DECODE, PADDED, PAGED, DROPOUT)
    r = replay(w, "llama.json")
    kinds = {rec.order: (v.shape.kind, v.mask, v.shape.name) for rec, v in r.variants}
    assert kinds[0] == ("prefill", Mask.causal(), "wl-llama-r0")
    assert kinds[1][0] == "decode" and kinds[2][0] == "varlen" and kinds[3][0] == "decode"
    padded = dict(r.variants)[w.records[2]].case("sdpa-math")
    assert padded.seqlens_q == (7, 4) and padded.mask == Mask.causal()
    paged = dict(r.variants)[w.records[3]].case("sdpa-math")
    assert paged.seqlens_k == (6, 41, 18) and paged.cache is not None and paged.cache.append == 1
    assert [(rec.order, why) for rec, why in r.refused] == [(4, "dropout_p=0.5: ...")]
    assert r.record_of("wl-llama-r1") == w.records[1]


def test_a_custom_mask_and_a_ragged_cross_attention_are_refused_with_why():
    custom = Call("sdpa", 1, 8, 8, 4, 4, 16, 16, "fp32", "custom", density=0.5)
    cross = Call("flash_attn_varlen_func", 2, 5, 9, 4, 4, 16, 16, "bf16", seqlens_q=(3, 5), seqlens_k=(9, 2))
    assert "custom mask" in record_variant(workload(custom), workload(custom).records[0], "w")
    assert "differ" in record_variant(workload(cross), workload(cross).records[0], "w")


def test_the_command_runs_a_script_under_capture(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    script = tmp_path / "model.py"
    script.write_text("import sys, torch\nimport torch.nn.functional as F\nq = torch.zeros(1, 2, 4, 8)\n"
                      "for _ in range(int(sys.argv[1])):\n    F.scaled_dot_product_attention(q, q, q, dropout_p=0.3)\n")
    assert main(["out.workload.json", str(script), "3"]) == 0
    w = load_workload(tmp_path / "out.workload.json")
    assert (w.name, len(w.records), w.records[0].count) == ("out", 1, 3)
    assert "model.py 3" in w.source
    said = capsys.readouterr().out
    assert "1 distinct attention call(s), 3 in all" in said and "not replayable: record 0" in said


ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(("name", "records", "calls"), [("llama3-8b", 129, 32 * 129), ("qwen2.5-7b", 129, 28 * 129),
                                                        ("hunyuan-video-dit", 1, 60)])
def test_the_shipped_workloads_load_and_every_record_replays(name, records, calls):
    w = load_workload(ROOT / "pytest_attn" / "workloads" / f"{name}.workload.json")
    r = replay(w, name)
    assert (len(w.records), sum(rec.count for rec in w.records), len(r.variants), r.refused) == (records, calls,
                                                                                                records, ())


def test_the_capture_script_rewrites_the_dit_workload_as_shipped(tmp_path):
    spec = importlib.util.spec_from_file_location("capture_workloads", ROOT / "scripts" / "capture_workloads.py")
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    assert script.main([str(tmp_path), "--only", "hunyuan-video-dit"]) == 0
    name = "hunyuan-video-dit.workload.json"
    assert load_workload(tmp_path / name) == load_workload(ROOT / "pytest_attn" / "workloads" / name)
