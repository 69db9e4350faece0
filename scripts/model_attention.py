"""A model's own attention time, measured in the model run, beside a replay of its workload (issue 53's check that
a workload stands for its model). GPU; on a CPU it runs a tiny config for the tests.

    python3 scripts/model_attention.py OUT/ --model llama3-8b            # capture + profile, on the GPU
    pytest suites/ --attn-workload=OUT/llama3-8b.workload.json --benchmark-json=OUT/replay.json ...
    python3 scripts/model_attention.py OUT/ --model llama3-8b --replay OUT/replay.json   # the comparison

The model is built from its published config (``scripts/capture_workloads.py``) with random weights on the GPU
(bf16, no download): a prefill of 4 prompts x 2,048 tokens, then 128 decode steps through its own KV cache.
One run under ``pytest_attn.capture`` (the workload, and the warm-up), then one under ``torch.profiler``: the
model's attention time is the device time of the kernels under its ``aten::scaled_dot_product_attention`` calls
(their children included), prefill and decode told apart by the query's length. ``--replay`` adds a
``--benchmark-json`` of the workload's replay: each back end's step (median x count over the records) and, for the
SDPA back end the model's calls went to, how far the replay is from the model's own time (Llama-3-8B on an H200:
71.1 ms in the model, 75.0 ms replayed through sdpa-cudnn, +5.4 %; docs/workloads.md).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

SCRIPTS = Path(__file__).resolve().parent
SDPA = "aten::scaled_dot_product_attention"
#: the op SDPA dispatches to, by the plugin's back-end name (torch/nn/attention/__init__.py SDPBackend)
DISPATCH = {"aten::_scaled_dot_product_flash_attention": "sdpa-flash",
            "aten::_scaled_dot_product_cudnn_attention": "sdpa-cudnn",
            "aten::_scaled_dot_product_efficient_attention": "sdpa-efficient",
            "aten::_scaled_dot_product_attention_math": "sdpa-math"}
TINY = {"vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2,
        "num_attention_heads": 4, "num_key_value_heads": 2, "max_position_embeddings": 64}


def _capture_workloads() -> Any:
    spec = importlib.util.spec_from_file_location("capture_workloads", SCRIPTS / "capture_workloads.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def attention_time(events: Iterable[Any], on_gpu: bool = True) -> dict[str, dict[str, Any]]:
    """Per phase (``prefill``: more than one query a sequence; ``decode``: one), the device time (s) of the kernels
    under each top-level SDPA call among a profiler's ``events`` (recorded with shapes), how many calls, the op each
    dispatched to, and its kernels' names (on a CPU: its CPU time). An SDPA call inside another is counted once."""
    phases: dict[str, dict[str, Any]] = {}
    for e in events:
        if e.name != SDPA or _inside_sdpa(e):
            continue
        shapes = getattr(e, "input_shapes", None) or [[]]
        phase = "decode" if len(shapes[0]) == 4 and shapes[0][2] == 1 else "prefill"
        p = phases.setdefault(phase, {"seconds": 0.0, "calls": 0, "ops": {}, "kernels": {}})
        p["calls"] += 1
        p["seconds"] += (e.device_time_total if on_gpu else e.cpu_time_total) * 1e-6
        for child in [e, *_descendants(e)]:
            if child.name in DISPATCH:
                p["ops"][child.name] = p["ops"].get(child.name, 0) + 1
            for k in getattr(child, "kernels", []):
                p["kernels"][k.name] = p["kernels"].get(k.name, 0) + 1
    return phases


def _inside_sdpa(event: Any) -> bool:
    parent = event.cpu_parent
    while parent is not None:
        if parent.name == SDPA:
            return True
        parent = parent.cpu_parent
    return False


def _descendants(event: Any) -> Iterable[Any]:
    for child in event.cpu_children:
        yield child
        yield from _descendants(child)


def dispatched(ops: Mapping[str, int]) -> str | None:
    """The plugin's name for the SDPA back end the calls went to, where they all went to one."""
    names = {DISPATCH[op] for op in ops}
    return names.pop() if len(names) == 1 else None


def replay_steps(replay: Mapping[str, Any], workload: Any) -> dict[str, dict[str, Any]]:
    """Per back end of a replay's ``--benchmark-json``: its step (median x the record's count over the records it
    ran), split into the first record (the prefill) and the rest, and how many records it ran. ``workload``: a
    :class:`pytest_attn.core.workload.Workload`; its cases are named as the replay names them."""
    from pytest_attn.core.replay import case_name

    records = {case_name(workload, r): r for r in workload.records}
    first = case_name(workload, workload.records[0])
    steps: dict[str, dict[str, Any]] = {}
    for bench in replay["benchmarks"]:
        info = bench["extra_info"]
        shape, backend = info["case"]["shape"], info["case"]["backend"]
        if shape not in records:
            continue
        s = steps.setdefault(backend, {"seconds": 0.0, "first": 0.0, "records": 0})
        took = info["timing"]["median_s"] * records[shape].count
        s["seconds"] += took
        s["first"] += took if shape == first else 0.0
        s["records"] += 1
    for s in steps.values():
        s["complete"] = s["records"] == len(records)
    return steps


def _model(cw: Any, name: str, device: str) -> tuple[Any, int, int, int]:
    import torch
    import transformers

    kind, config = {"llama3-8b": ("Llama", cw.LLAMA3_8B), "qwen2.5-7b": ("Qwen2", cw.QWEN25_7B),
                    "tiny-llama": ("Llama", TINY)}[name]
    cfg = getattr(transformers, f"{kind}Config")(**config, attn_implementation="sdpa")
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    torch.manual_seed(0)
    with torch.device(device):
        model = getattr(transformers, f"{kind}ForCausalLM")(cfg).to(dtype).eval()
    if name == "tiny-llama":
        return model, 2, 7, 2
    return model, cw.PROMPTS, cw.PROMPT_TOKENS, cw.DECODE_STEPS


def measure(name: str, out: Path, device: str) -> dict[str, Any]:
    """Capture the model's step into ``out/NAME.workload.json``, then profile it: prefill and decode apart."""
    import torch
    from torch.profiler import ProfilerActivity, profile

    import pytest_attn

    cw = _capture_workloads()
    model, prompts, tokens, steps = _model(cw, name, device)
    path = out / f"{name}.workload.json"
    with pytest_attn.capture(path, name=name, source=f"scripts/model_attention.py on {device}"):
        cw._llm_step(model, steps, device, prompts, tokens)
    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device == "cuda" else [])
    if device == "cuda":
        torch.cuda.synchronize()
    with profile(activities=activities, record_shapes=True) as prof:
        cw._llm_step(model, steps, device, prompts, tokens)
        if device == "cuda":
            torch.cuda.synchronize()
    phases = attention_time(prof.events(), device == "cuda")
    ops: dict[str, int] = {}
    for p in phases.values():
        for op, n in p["ops"].items():
            ops[op] = ops.get(op, 0) + n
    return {"model": name, "device": torch.cuda.get_device_name() if device == "cuda" else "cpu",
            "workload": str(path), "phases": phases, "backend": dispatched(ops),
            "seconds": sum(p["seconds"] for p in phases.values())}


def compare(model: Mapping[str, Any], steps: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """Lines: the model's own attention time, each back end's replayed step, and the replay against the model for
    the back end its calls went to."""
    ph = model["phases"]
    lines = [f"{model['model']} on {model['device']}: attention in the model run {model['seconds'] * 1e3:.3f} ms"
             f" (prefill {ph['prefill']['seconds'] * 1e3:.3f} ms over {ph['prefill']['calls']} calls, decode"
             f" {ph['decode']['seconds'] * 1e3:.3f} ms over {ph['decode']['calls']}), SDPA dispatched to"
             f" {model['backend'] or 'no one SDPA back end of the plugin'}"]
    for backend, s in sorted(steps.items(), key=lambda kv: kv[1]["seconds"]):
        whole = "" if s["complete"] else f" (ran {s['records']} records: no step total)"
        lines.append(f"  replay {backend}: {s['seconds'] * 1e3:.3f} ms per step, prefill {s['first'] * 1e3:.3f} ms,"
                     f" decode {(s['seconds'] - s['first']) * 1e3:.3f} ms{whole}")
    mine = steps.get(model["backend"] or "")
    if mine and mine["complete"]:
        lines.append(f"  replay / model for {model['backend']}: step {mine['seconds'] / model['seconds'] - 1:+.1%},"
                     f" prefill {mine['first'] / ph['prefill']['seconds'] - 1:+.1%}, decode"
                     f" {(mine['seconds'] - mine['first']) / ph['decode']['seconds'] - 1:+.1%}")
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, help="folder for NAME.workload.json and NAME.model.json")
    parser.add_argument("--model", default="llama3-8b", choices=["llama3-8b", "qwen2.5-7b", "tiny-llama"])
    parser.add_argument("--device", default="cuda", choices=["cuda", "cpu"])
    parser.add_argument("--replay", type=Path, help="a --benchmark-json of the workload's replay, to compare")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    saved = args.out / f"{args.model}.model.json"
    if args.replay is None:
        saved.write_text(json.dumps(measure(args.model, args.out, args.device), indent=1))
    model = json.loads(saved.read_text())
    steps = {}
    if args.replay is not None:
        from pytest_attn.core.workload import load_workload

        workload = load_workload(args.out / f"{args.model}.workload.json")
        steps = replay_steps(json.loads(args.replay.read_text()), workload)
    print("\n".join(compare(model, steps)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
