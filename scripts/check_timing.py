"""Cross-check pytest-attn's reported medians against the PyTorch profiler's kernel times (GPU).

For each case: run it through pytest-attn's engine (warm-up, timer choice, sampling), then run the
same call eagerly under torch.profiler, with the same L2 flush before each call, and sum the device
time of the kernels the call launched (the flush kernel left out). Prints both and their ratio.

    python scripts/check_timing.py                     # the built-in cases below
    python scripts/check_timing.py --calls 50 --json out.json
"""

from __future__ import annotations

import argparse
import json
import sys

import torch

from pytest_attn.backends import builtin_registry
from pytest_attn.catalog import SHAPES_BY_NAME
from pytest_attn.device import probe_device
from pytest_attn.inputs import make_inputs
from pytest_attn.runner import CaseSkipped, RunSettings, make_step, run_case
from pytest_attn.stopping import StopRule
from pytest_attn.timing import L2Flush

CASES = [
    ("hunyuan-video", "sdpa-flash", "none", "fwd"),
    ("hunyuan-video", "sdpa-cudnn", "none", "fwd"),
    ("llama3-8b-prefill", "sdpa-flash", "causal", "fwd"),
    ("gpt2-small", "sdpa-flash", "causal", "fwd+bwd"),
    ("qwen2.5-7b-decode-k4096", "sdpa-flash", "causal", "fwd"),
    ("qwen2.5-7b-decode-k4096", "sdpa-cudnn", "causal", "fwd"),
    ("qwen2.5-7b-decode-k4096", "varlen", "causal", "fwd"),
    ("qwen2.5-7b-decode-k32768", "sdpa-flash", "causal", "fwd"),
]


def profiler_kernel_time(step, flush, calls: int) -> tuple[float, list[str]]:
    """Mean device time per call of the kernels ``step`` launches, by the PyTorch profiler."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    for _ in range(3):
        flush()
        step()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        for _ in range(calls):
            flush()
            step()
        torch.cuda.synchronize()
    total_us = 0.0
    names: dict[str, float] = {}
    for evt in prof.events():
        if evt.device_type != DeviceType.CUDA:
            continue
        if "FillFunctor<signed char>" in evt.name:  # the L2 flush
            continue
        us = evt.time_range.elapsed_us()
        total_us += us
        names[evt.name[:90]] = names.get(evt.name[:90], 0.0) + us
    return total_us / calls / 1e6, [f"{v / calls:9.2f} us  {k}" for k, v in sorted(names.items(), key=lambda kv: -kv[1])]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--calls", type=int, default=30)
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    device = probe_device()
    print(device.describe())
    registry = builtin_registry()
    settings = RunSettings(stop=StopRule(max_time_s=3.0))
    rows = []
    from pytest_attn.case import Mask

    for shape_name, backend_name, mask, direction in CASES:
        shape = SHAPES_BY_NAME[shape_name]
        case = shape.case(backend_name, "bf16", Mask.causal() if mask == "causal" else Mask.none(), direction)
        backend = registry.get(backend_name)
        try:
            result = run_case(case, backend, device, settings)
        except CaseSkipped as exc:
            print(f"{case.id}: skipped: {exc}")
            continue
        dev = torch.device("cuda", device.index or 0)
        inputs = make_inputs(case, backend.layout, dev, requires_grad=direction == "fwd+bwd", seed=0)
        step = make_step(case, backend.prepare(case, inputs), inputs)
        flush = L2Flush(device.l2_bytes, dev)
        calls = args.calls if result.median_s < 0.05 else 5
        prof_s, kernels = profiler_kernel_time(step, flush, calls)
        ratio = result.median_s / prof_s
        row = {"case": case.id, "timer": result.timer, "calls_per_sample": result.calls_per_sample,
               "input_sets": result.input_sets, "median_s": result.median_s, "precision": result.precision,
               "profiler_s": prof_s, "ratio": ratio, "sm_clock_mhz": result.sm_clock_mhz,
               "tflops": result.figures.tflops, "mfu": result.figures.mfu_datasheet,
               "mfu_at_clock": result.figures.mfu_at_clock, "kernels": kernels[:6]}
        rows.append(row)
        print(f"{case.id:55s} {result.timer:10s} x{result.calls_per_sample:<3d} median {result.median_s*1e6:12.2f} us"
              f"  profiler {prof_s*1e6:12.2f} us  ratio {ratio:.4f}  clock {result.sm_clock_mhz}")
        for k in kernels[:4]:
            print("     ", k)
        del inputs, step, flush
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": device.as_machine_info(), "rows": rows}, fh, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
