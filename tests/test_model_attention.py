"""scripts/model_attention.py: a model's own attention time beside its workload's replay (issue 53). The profiler's
events and a replay's JSON by hand-built fakes; the script end to end on a tiny Llama on the CPU (e2e tier:
transformers)."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

SCRIPT = Path(__file__).resolve().parent.parent / "scripts" / "model_attention.py"
spec = importlib.util.spec_from_file_location("model_attention", SCRIPT)
ma = importlib.util.module_from_spec(spec)
sys.modules["model_attention"] = ma
spec.loader.exec_module(ma)


def event(name, us=0.0, shapes=None, children=(), kernels=()):
    e = SimpleNamespace(name=name, device_time_total=us, cpu_time_total=0.0, input_shapes=shapes or [],
                        cpu_children=list(children), cpu_parent=None,
                        kernels=[SimpleNamespace(name=k) for k in kernels])
    for c in children:
        c.cpu_parent = e
    return e


def sdpa(us, q_len, op="aten::_scaled_dot_product_flash_attention", kernel="flash_fwd_kernel"):
    inner = event(op, us, kernels=[kernel])
    return [event(ma.SDPA, us, [[4, 32, q_len, 128]], [inner]), inner]


def test_attention_time_splits_prefill_from_decode_and_names_the_dispatch():
    events = [*sdpa(500.0, 2048), *sdpa(20.0, 1), *sdpa(22.0, 1), event("aten::mm", 900.0)]
    phases = ma.attention_time(events)
    assert phases["prefill"]["calls"] == 1 and phases["prefill"]["seconds"] == pytest.approx(500e-6)
    assert phases["decode"]["calls"] == 2 and phases["decode"]["seconds"] == pytest.approx(42e-6)
    assert phases["decode"]["kernels"] == {"flash_fwd_kernel": 2}
    assert ma.dispatched(phases["prefill"]["ops"]) == "sdpa-flash"


def test_an_sdpa_call_inside_another_is_counted_once():
    inner, _ = sdpa(30.0, 1)
    outer = event(ma.SDPA, 30.0, [[4, 32, 1, 128]], [inner])
    assert ma.attention_time([outer, inner])["decode"]["calls"] == 1


def test_two_back_ends_are_not_one():
    assert ma.dispatched({"aten::_scaled_dot_product_flash_attention": 3,
                          "aten::_scaled_dot_product_cudnn_attention": 1}) is None


def bench(shape, backend, median_s):
    return {"extra_info": {"case": {"shape": shape, "backend": backend}, "timing": {"median_s": median_s}}}


def test_replay_steps_weigh_each_record_by_its_count_and_say_which_are_whole():
    records = (SimpleNamespace(count=32, order=0), SimpleNamespace(count=32, order=1))
    workload = SimpleNamespace(name="m", records=records)  # what core.replay.case_name reads
    replay = {"benchmarks": [bench("wl-m-r0", "sdpa-flash", 1e-3), bench("wl-m-r1", "sdpa-flash", 2e-5),
                             bench("wl-m-r0", "fa4", 8e-4), bench("other", "fa4", 1.0)]}
    steps = ma.replay_steps(replay, workload)
    assert steps["sdpa-flash"]["seconds"] == pytest.approx(32 * (1e-3 + 2e-5))
    assert steps["sdpa-flash"]["first"] == pytest.approx(32e-3) and steps["sdpa-flash"]["complete"]
    assert not steps["fa4"]["complete"]
    model = {"model": "m", "device": "GPU", "backend": "sdpa-flash", "seconds": 32 * 1.1e-3,
             "phases": {"prefill": {"seconds": 32 * 1e-3, "calls": 32},
                        "decode": {"seconds": 32 * 1e-4, "calls": 32}}}
    lines = ma.compare(model, steps)
    assert "replay / model for sdpa-flash: step -7.3%, prefill +0.0%, decode -80.0%" in lines[-1]
    assert "no step total" in next(x for x in lines if "fa4" in x)


@pytest.mark.e2e
def test_a_tiny_llama_is_captured_profiled_and_compared(tmp_path, capsys):
    pytest.importorskip("transformers", reason="transformers is not installed: pip install -e .[dev]")
    assert ma.main([str(tmp_path), "--model", "tiny-llama", "--device", "cpu"]) == 0
    model = json.loads((tmp_path / "tiny-llama.model.json").read_text())
    assert model["phases"]["prefill"]["calls"] == 2 and model["phases"]["decode"]["calls"] == 4  # 2 layers x 2
    workload = json.loads((tmp_path / "tiny-llama.workload.json").read_text())
    assert [r["count"] for r in workload["records"]] == [2, 2, 2]
    replay = {"benchmarks": [bench(f"wl-tiny-llama-r{i}", "sdpa-math", 1e-4) for i in range(3)]}
    (tmp_path / "replay.json").write_text(json.dumps(replay))
    capsys.readouterr()
    assert ma.main([str(tmp_path), "--model", "tiny-llama", "--replay", str(tmp_path / "replay.json")]) == 0
    assert "replay sdpa-math: 0.600 ms per step" in capsys.readouterr().out
