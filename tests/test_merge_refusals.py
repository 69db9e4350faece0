"""``pytest-attn merge`` refuses what would gate a share of a run as if it were the whole: shards measured on two
GPU models, a shard that measured nothing (it says why: the plugin writes its JSON even then), and a file that
holds no benchmarks without a word of why. A shard that selected no case (more shards than problems) is a note."""

from __future__ import annotations

import json

import pytest
from factories import H100, H200, record

from pytest_attn.plugin.sharding import shard_mark
from pytest_attn.verdicts.cli import main

PROBLEMS = ["gpt2", "llama"]


def _shard(path, records, index, *, nothing=None, count=2):
    data = {"machine_info": {}, "attn_shard": shard_mark(index, count, PROBLEMS), "benchmarks": [
        {"fullname": r.name, "name": r.name, "group": r.case.group, "stats": {"median": r.median_s},
         "extra_info": r.to_json()} for r in records]}
    if nothing is not None:
        data["attn_measured_nothing"] = nothing
    path.write_text(json.dumps(data))
    return str(path)


def test_shards_of_two_gpu_models_are_refused_naming_each_file_and_model(tmp_path, capsys):
    a = _shard(tmp_path / "s1.json", [record("flash-attn", 1e-3, test="t.py::t[fa]", device=H200)], 1)
    b = _shard(tmp_path / "s2.json", [record("sdpa-cudnn", 2e-3, test="t.py::t[cudnn]", device=H100)], 2)
    assert main(["merge", a, b, "--baseline", "off"]) == 4
    out = capsys.readouterr().out
    assert (f"pytest-attn merge: the files were measured on 2 GPU models ({a} on NVIDIA H200; {b} on NVIDIA H100"
            " 80GB HBM3): each case is gated against its own model's baseline") in out
    assert "merge each model's shards on their own" in out and "results" not in out
    assert main(["merge", a, b, "--baseline", "off", "--allow-partial"]) == 4  # no flag makes half a gate whole


def test_a_shard_whose_cases_were_all_skipped_fails_the_merge_saying_why(tmp_path, capsys):
    a = _shard(tmp_path / "s1.json", [record("flash-attn", 1e-3, test="t.py::t[fa]")], 1)
    b = _shard(tmp_path / "s2.json", [], 2, nothing={
        "selected": 3, "skipped": 3, "failed": 0, "reasons": [["FA4 needs an SM90 or newer GPU", 2], ["no CUDA", 1]]})
    assert main(["merge", a, b, "--baseline", "off"]) == 4
    out = capsys.readouterr().out
    assert (f"pytest-attn merge: shard 2/2 ({b}) measured nothing: its cases were all skipped (2 x FA4 needs an SM90"
            " or newer GPU; 1 x no CUDA). Merge every shard of one run, each of which measured its cases") in out
    merged = tmp_path / "m.json"
    assert main(["merge", a, b, "--baseline", "off", "--allow-partial", "--json", str(merged)]) == 0
    assert "shard 2/2" in json.loads(merged.read_text())["attn_partial"]["reason"]


def test_a_shard_that_selected_no_case_is_a_note_and_a_file_that_does_not_say_why_is_refused(tmp_path, capsys):
    a = _shard(tmp_path / "s1.json", [record("flash-attn", 1e-3, test="t.py::t[fa]")], 1)
    b = _shard(tmp_path / "s2.json", [], 2, nothing={"selected": 0, "skipped": 0, "failed": 0, "reasons": []})
    assert main(["merge", a, b, "--baseline", "off"]) == 0
    assert f"note: shard 2/2 ({b}) selected no case (more shards than problems)" in capsys.readouterr().out
    silent = _shard(tmp_path / "s2b.json", [], 2)
    assert main(["merge", a, silent, "--baseline", "off"]) == 4
    assert f"{silent} holds no benchmarks and does not say why" in capsys.readouterr().out


SUITE = """
from pytest_attn.core.case import AttnCase


def pytest_generate_tests(metafunc):
    cases = [AttnCase.dense(backend=b, shape=s, batch=1, seqlen_q=16, heads_q=2, head_dim=16, dtype="fp32")
             for s in ("first", "second") for b in ("flash-attn", "sdpa-math")]
    metafunc.parametrize("case", cases, ids=[c.id for c in cases])


def test_attn(attn_bench, case):
    attn_bench(case)
"""


def test_a_shard_that_measured_nothing_still_writes_its_json_and_the_merge_says_why(pytester, capsys):
    """Shard 2/2 holds the problem "second", and only its flash-attn case is left by -k: on a CPU it is skipped.
    pytest-benchmark writes no --benchmark-json without a benchmark; the plugin writes one that says why."""
    pytester.makepyfile(test_suite=SUITE)
    args = ["-p", "no:cacheprovider", "--attn-baseline=off", "--attn-max-time=0.02", "--attn-min-samples=5"]
    one = pytester.runpytest(*args, "--attn-shard=1/2", "--benchmark-json=s1.json")
    two = pytester.runpytest(*args, "--attn-shard=2/2", "--benchmark-json=s2.json", "-k", "flash-attn")
    assert one.ret == 0 and two.ret == 0, two.stdout.str()
    written = json.loads((pytester.path / "s2.json").read_text())
    assert written["benchmarks"] == [] and written["attn_shard"]["index"] == 2
    nothing = written["attn_measured_nothing"]
    assert (nothing["selected"], nothing["skipped"], nothing["failed"]) == (1, 1, 0)
    capsys.readouterr()
    assert main(["merge", str(pytester.path / "s1.json"), str(pytester.path / "s2.json"), "--baseline", "off"]) == 4
    out = capsys.readouterr().out
    assert f"shard 2/2 ({pytester.path / 's2.json'}) measured nothing: its cases were all skipped (1 x " in out


@pytest.mark.e2e  # a real process: Ctrl-C in an in-process run would stop this session too
def test_a_run_stopped_before_its_first_case_writes_a_json_that_says_so(pytester):
    """Ctrl-C before the first case (on a GPU: during FlashInfer's first build): pytest-benchmark had opened the
    --benchmark-json at start-up and left it 0 bytes. The plugin writes the run: no benchmarks, marked partial."""
    pytester.makepyfile(test_suite=SUITE)
    pytester.makeconftest("def pytest_runtest_setup(item):\n    raise KeyboardInterrupt\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--attn-baseline=off", "--benchmark-json=run.json")
    assert result.ret == 2
    written = json.loads((pytester.path / "run.json").read_text())
    assert written["benchmarks"] == [] and "attn_shard" not in written
    assert written["attn_partial"]["reason"].startswith("interrupted")
    assert written["attn_measured_nothing"]["selected"] == 4


@pytest.fixture(autouse=True)
def _no_columns(monkeypatch):
    monkeypatch.delenv("COLUMNS", raising=False)


def test_the_merged_json_of_shards_is_a_whole_run_and_gates_again(tmp_path, capsys):
    """It kept the first shard's mark: merging (gating) the merged JSON again read "shard 2/2 is missing"."""
    a = _shard(tmp_path / "s1.json", [record("flash-attn", 1e-3, test="t.py::t[fa]")], 1)
    b = _shard(tmp_path / "s2.json", [record("sdpa-cudnn", 2e-3, test="t.py::t[cudnn]")], 2)
    merged = tmp_path / "run.json"
    assert main(["merge", a, b, "--baseline", "off", "--json", str(merged)]) == 0
    assert "attn_shard" not in json.loads(merged.read_text())
    assert main(["merge", str(merged), "--baseline", "off"]) == 0
    assert "merged 1 file(s): 2 results" in capsys.readouterr().out
