"""Cross-check pytest-attn's reported medians against the PyTorch profiler's kernel times (GPU).

For each case: prepare it through pytest-attn's engine (warm-up, timer choice, input rotation,
graph capture) and take its samples as the suite does; then take more samples of the same timer
under torch.profiler and sum the device time of the kernels they launched (the L2-flush kernel left
out), per call. A reported median far above that sum would be host overhead read as kernel time.

    PYTHONPATH=. python scripts/check_timing.py [--samples 10] [--json out.json]
"""

from __future__ import annotations

import argparse
import gc
import json
import sys

import torch

from pytest_attn.backends import builtin_registry
from pytest_attn.backends.base import Unsupported
from pytest_attn.case import Mask
from pytest_attn.catalog import SHAPES_BY_NAME
from pytest_attn.device import probe_device
from pytest_attn.runner import CaseSkipped, RunSettings, check_can_run, prepare_timer
from pytest_attn.stopping import StopRule, median
from pytest_attn.timing import sample_until

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


def kernel_time(run, calls: int) -> tuple[float, list[str]]:
    """Device time per call of the kernels launched by ``run()`` (which makes ``calls`` calls), by
    the PyTorch profiler, leaving out the L2-flush kernel."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile

    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA, ProfilerActivity.CPU]) as prof:
        run()
        torch.cuda.synchronize()
    total_us = 0.0
    names: dict[str, float] = {}
    for evt in prof.events():
        if evt.device_type != DeviceType.CUDA or "FillFunctor<signed char>" in evt.name:
            continue
        us = evt.time_range.elapsed_us()
        total_us += us
        names[evt.name[:90]] = names.get(evt.name[:90], 0.0) + us
    ranked = sorted(names.items(), key=lambda kv: -kv[1])
    return total_us / calls / 1e6, [f"{v / calls:10.2f} us  {k}" for k, v in ranked]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=10, help="timer samples to profile")
    ap.add_argument("--json", default=None)
    args = ap.parse_args()
    device = probe_device()
    print(device.describe())
    registry = builtin_registry()
    settings = RunSettings(stop=StopRule(max_time_s=3.0))
    rows = []
    for shape_name, backend_name, mask, direction in CASES:
        shape = SHAPES_BY_NAME[shape_name]
        case = shape.case(backend_name, "bf16", Mask.causal() if mask == "causal" else Mask.none(), direction)
        backend = registry.get(backend_name)
        try:
            check_can_run(case, backend, device, int(torch.cuda.mem_get_info()[0] * 0.9))
            prepared = prepare_timer(case, backend, device, settings)
        except (CaseSkipped, Unsupported) as exc:
            print(f"{case.id}: skipped: {exc}")
            continue
        timer = prepared.timer
        sampling = sample_until(timer, settings.stop, read_sm_clock=device.nvml.sm_clock_mhz)
        reported = median(sampling.samples_s)
        # The same timer's own samples, under the profiler (kernel-sum reads CUPTI itself, so its
        # inner graph or event timer is profiled instead): is the figure the kernels' time?
        base = getattr(timer, "inner", timer)
        n = args.samples if reported < 0.05 else 3
        replays: list[float] = []
        def run(base=base, n=n, replays=replays) -> None:
            replays.extend(base.sample() for _ in range(n))

        prof_s, kernels = kernel_time(run, n * base.calls_per_sample)
        ratio = reported / prof_s
        clock = median(sampling.sm_clocks_mhz) if sampling.sm_clocks_mhz else None
        rows.append({"case": case.id, "timer": prepared.kind, "calls_per_sample": timer.calls_per_sample,
                     "input_sets": prepared.input_sets, "samples": len(sampling.samples_s),
                     "median_s": reported, "profiler_kernel_s": prof_s, "ratio": ratio,
                     "inner_timer": base.kind, "inner_median_s": median(replays), "sm_clock_mhz": clock,
                     "kernels": kernels[:6]})
        print(f"{case.id:52s} {prepared.kind:10s} x{timer.calls_per_sample:<3d} sets {prepared.input_sets:<2d}"
              f" median {reported * 1e6:11.2f} us | profiler kernels {prof_s * 1e6:11.2f} us"
              f" ratio {ratio:.4f} | {base.kind} {median(replays) * 1e6:11.2f} us | SM {clock} MHz")
        for k in kernels[:4]:
            print("     ", k)
        del prepared, timer
        gc.collect()
        torch.cuda.empty_cache()
    if args.json:
        with open(args.json, "w") as fh:
            json.dump({"device": device.as_machine_info(), "rows": rows}, fh, indent=1)
    worst = max((abs(r["ratio"] - 1) for r in rows), default=0.0)
    print(f"largest difference between reported median and profiler kernel time: {worst * 100:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
