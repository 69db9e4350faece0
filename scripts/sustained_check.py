"""Check the plugin's sustained figures (``--attn-sustained``) against an independent measurement: the same calls,
built here from each record's shape with the libraries' own functions (not the plugin's back ends; forward, or
forward and backward through autograd), captured as a plain graph of up to 3,000 back-to-back calls, with NVML's
power sampled every 10 ms on a thread.

    pytest suites/test_prefill.py --attn-profile=sustained --attn-backends=fa4,sdpa-cudnn,flash-attn \\
        --attn-sustained --benchmark-json=run.json
    python scripts/sustained_check.py run.json            # on the same GPU, right after

Per case: the plugin's sustained time per call against this script's over the second of two halves (the first
half, replayed for some seconds, brings the GPU to its settled state and NVML's readings up to it), and the
plugin's energy per call against this script's power integrated over that half, divided by its calls. Exit 1
when a time differs by more than 3 % or an energy by more than 5 %, or the host saw the window other than the
GPU did. Dense cases with no mask or a causal mask, fwd and fwd+bwd, for ``fa4``, ``flash-attn`` and the SDPA
back ends.
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import threading
import time
from itertools import pairwise
from pathlib import Path
from typing import Any

TIME_TOLERANCE = 0.03
ENERGY_TOLERANCE = 0.05
MAX_CALLS = 3000
MAX_HALF_S = 4.0  # a half of a long call's graph: this long at most (HunyuanVideo: a few calls)
#: The first graph is replayed this long before the measured window, the second at least this long in it: NVML's
#: power and energy counter trail the load (on an H100, a 1.5 s window that followed 1.5 s of load read 277 W
#: for a 690 W cuDNN call, its counter too), so the window starts well after the load does.
LEAD_S = 4.0
WINDOW_S = 3.0
#: The host's view of the measured window (when its first and last events completed) against the GPU's: an
#: energy over a window the host did not see whole is no check at all.
HOST_WINDOW_TOLERANCE = 0.02


def _forward(case: dict[str, Any], q: Any, k: Any, v: Any) -> Any:
    """The case's forward call over ``q, k, v`` (batch, seq, heads, dim), through the library's own function."""
    import torch.nn.functional as F

    causal = case["mask"] == "causal"
    backend = case["backend"]
    if backend == "flash-attn":
        from flash_attn import flash_attn_func

        return lambda: flash_attn_func(q, k, v, causal=causal)
    if backend == "fa4":
        from flash_attn.cute import flash_attn_func as fa4

        return lambda: fa4(q, k, v, causal=causal)
    if backend.startswith("sdpa-"):
        from torch.nn.attention import SDPBackend, sdpa_kernel

        kernel = {"sdpa-cudnn": SDPBackend.CUDNN_ATTENTION, "sdpa-flash": SDPBackend.FLASH_ATTENTION,
                  "sdpa-efficient": SDPBackend.EFFICIENT_ATTENTION}[backend]
        if causal and q.shape[1] != k.shape[1]:
            raise ValueError("bottom-right causal with sq != sk needs an explicit mask: not checked here")

        def sdpa() -> Any:
            # the (b, h, s, d) views made in the call: made once outside, their backward nodes belong to the
            # stream that made them, and a capture of the backward then fails ("operation would make the legacy
            # stream depend on a capturing blocking stream", cuDNN's Llama fwd+bwd on an H100)
            qt, kt, vt = (t.transpose(1, 2) for t in (q, k, v))
            with sdpa_kernel(kernel):
                out = F.scaled_dot_product_attention(qt, kt, vt, is_causal=causal, enable_gqa=q.shape[2] != k.shape[2])
            return out.transpose(1, 2)

        return sdpa
    raise ValueError(f"{backend}: not built by this script")


def _call(case: dict[str, Any]) -> Any:
    """The case's call (forward, or forward and backward), from its shape alone."""
    import torch

    if len(set(case["seqlens_q"])) > 1 or len(set(case["seqlens_k"])) > 1 or case.get("cache"):
        raise ValueError("a ragged batch or a KV cache: not built by this script")
    if case["mask"] not in ("full", "causal") or case["direction"] not in ("fwd", "fwd+bwd"):
        raise ValueError(f"mask {case['mask']}, {case['direction']}: this script builds no mask or causal")
    b, sq, sk = len(case["seqlens_q"]), case["seqlens_q"][0], case["seqlens_k"][0]
    hq, hk, d, dv = case["heads_q"], case["heads_kv"], case["head_dim_qk"], case["head_dim_v"]
    dtype = {"bf16": torch.bfloat16, "fp16": torch.float16}[case["dtype"]]
    grad = case["direction"] == "fwd+bwd"
    q, k, v = (torch.randn(b, s, h, dim, device="cuda", dtype=dtype, requires_grad=grad)
               for s, h, dim in ((sq, hq, d), (sk, hk, d), (sk, hk, dv)))
    forward = _forward(case, q, k, v)
    if not grad:
        return forward
    d_out = torch.randn(b, sq, hq, dv, device="cuda", dtype=dtype)

    def step() -> Any:
        out = forward()
        out = out[0] if isinstance(out, tuple) else out
        return torch.autograd.grad(out, (q, k, v), d_out)

    return step


class PowerSampler:
    """NVML's power every ``period_s`` on a thread: (host time, watts)."""

    def __init__(self, handle: Any, nvml: Any, period_s: float = 0.01) -> None:
        self.handle, self.nvml, self.period_s = handle, nvml, period_s
        self.samples: list[tuple[float, float]] = []
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.samples.append((time.perf_counter(), self.nvml.nvmlDeviceGetPowerUsage(self.handle) / 1e3))
            time.sleep(self.period_s)

    def __enter__(self) -> PowerSampler:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def joules(self, start: float, end: float) -> float:
        """The power integrated from ``start`` to ``end`` (trapezoids over the samples inside, host clock)."""
        inside = [(t, w) for t, w in self.samples if start <= t <= end]
        return sum((t1 - t0) * (w0 + w1) / 2 for (t0, w0), (t1, w1) in pairwise(inside))


def measure(call: Any, burst_s: float, handle: Any, nvml: Any) -> dict[str, float]:
    """Two graphs of half the calls each, back to back, each replayed (the first for :data:`LEAD_S`, the second
    for :data:`WINDOW_S` at least); over the second's replays: the time per call, energy per call (power
    integrated, and NVML's counter), clock."""
    import torch

    half = max(1, min(MAX_CALLS // 2, math.ceil(MAX_HALF_S / burst_s)))
    side = torch.cuda.Stream()  # warm-up on a side stream, as capture asks (autograd's backward included)
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            call()
    torch.cuda.current_stream().wait_stream(side)
    torch.cuda.synchronize()
    graphs = []
    for _ in range(2):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(half):
                call()
        graphs.append(graph)
    torch.cuda.synchronize()
    lead = max(1, math.ceil(LEAD_S / (half * burst_s)))
    window = max(1, math.ceil(WINDOW_S / (half * burst_s)))
    time.sleep(3.0)  # idle first, as the plugin's burst figure starts
    events = [torch.cuda.Event(enable_timing=True) for _ in range(3)]
    recorded = [threading.Event() for _ in range(3)]
    marks: dict[int, tuple[float, int, int]] = {}

    def watch() -> None:
        """The host time, energy counter and clock as events 1 and 2 complete: on a thread of its own, as a
        replay's launch can hold the launching thread until much of the graph has run (a 1,500-call cuDNN graph
        on an H100: the window read from the launching thread was a fraction of the GPU's)."""
        for i in (1, 2):
            recorded[i].wait()
            while not events[i].query():
                time.sleep(2e-4)
            marks[i] = (time.perf_counter(), nvml.nvmlDeviceGetTotalEnergyConsumption(handle),
                        nvml.nvmlDeviceGetClockInfo(handle, nvml.NVML_CLOCK_SM))

    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    with PowerSampler(handle, nvml) as power:
        events[0].record()
        for _ in range(lead):
            graphs[0].replay()
        events[1].record()
        recorded[1].set()
        for _ in range(window):
            graphs[1].replay()
        events[2].record()
        recorded[2].set()
        watcher.join()
    (second_start, energy_start, clock), (second_end, energy_end, _) = marks[1], marks[2]
    seconds = events[1].elapsed_time(events[2]) / 1e3
    calls = half * window
    return {"calls": half * (lead + window), "time_s": seconds / calls, "clock_mhz": clock,
            "host_share": (second_end - second_start) / seconds,
            "power_j": power.joules(second_start, second_end) / calls,
            "counter_j": (energy_end - energy_start) / 1e3 / calls}


def _nvml_handle(pynvml: Any) -> Any:
    """NVML's handle for the GPU torch calls device 0, by its UUID: NVML numbers every GPU of the machine and
    ignores CUDA_VISIBLE_DEVICES, so its index 0 is another GPU where only some are visible (on a 4-GPU H100, a
    run on the fourth read the first one's power: 345 MHz and a tenth of the energy)."""
    import torch

    uuid = str(torch.cuda.get_device_properties(0).uuid)
    return pynvml.nvmlDeviceGetHandleByUUID(uuid if uuid.startswith(("GPU-", "MIG-")) else f"GPU-{uuid}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("run", type=Path, help="a pytest-benchmark JSON of an --attn-sustained run")
    args = parser.parse_args(argv)
    import pynvml

    pynvml.nvmlInit()
    handle = _nvml_handle(pynvml)
    run = json.loads(args.run.read_text())
    failed = 0
    print(f"{'case':58} {'plugin us':>10} {'here us':>9} {'diff':>6} {'plugin mJ':>10} {'power mJ':>9} {'diff':>6}")
    for bench in run["benchmarks"]:
        record = bench.get("extra_info") or {}
        loaded = record.get("sustained")
        if not loaded:
            continue
        try:
            call = _call(record["case"])
        except (ValueError, ImportError, KeyError) as exc:
            print(f"{record.get('id', '?'):58} skipped: {exc}")
            continue
        try:
            here = measure(call, record["timing"]["median_s"], handle, pynvml)
        except RuntimeError as exc:  # a capture that fails: this case is not checked, the others still are
            print(f"{record['id'][:58]:58} not checked: {type(exc).__name__}: {str(exc).splitlines()[0]}")
            failed += 1
            continue
        time_diff = loaded["median_s"] / here["time_s"] - 1
        energy = loaded.get("energy_per_call_j")
        energy_diff = energy / here["power_j"] - 1 if energy else math.nan
        host_off = abs(here["host_share"] - 1) > HOST_WINDOW_TOLERANCE
        bad = abs(time_diff) > TIME_TOLERANCE or not abs(energy_diff) <= ENERGY_TOLERANCE or host_off
        failed += bad
        print(f"{record['id'][:58]:58} {loaded['median_s'] * 1e6:10.1f} {here['time_s'] * 1e6:9.1f}"
              f" {time_diff:+6.1%} {(energy or math.nan) * 1e3:10.2f} {here['power_j'] * 1e3:9.2f} {energy_diff:+6.1%}"
              f"  ({here['calls']} calls, {here['clock_mhz']} MHz, counter {here['counter_j'] * 1e3:.2f} mJ)"
              + (f"  <- the host saw {here['host_share']:.0%} of the GPU's window: not measured" if host_off
                 else "  <- beyond 3 % / 5 %" if bad else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
