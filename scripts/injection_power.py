"""How extra work of each kind changes an attention step's clock at the power cap (GPU only).

``--attn-inject-slowdown`` adds work after each call to show that the gate catches a slower kernel. A real
slower kernel keeps the step's power draw; extra work that draws more power per cycle than the step lowers the
clock of the whole step, and the gate then reads the slowdown as the clock's (CLOCK). This script measures, per
step and per kind of extra work sized to a share of the step's time: the steady-state time per call, the SM clock
and the power, against the step alone. Run on one GPU:

    python scripts/injection_power.py --share 0.05 --json out.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import threading
import time
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch.nn.attention import SDPBackend, sdpa_kernel

from pytest_attn.engine.nvml import open_nvml

STEPS = {  # name: (batch, heads, seq, head dim, causal)
    "llama3-8b-prefill-causal": (1, 32, 8192, 128, True),
    "long-16k-full": (1, 8, 16384, 64, False),
    "bert-base-full": (16, 12, 512, 64, False),
    "gpt3-like-causal": (4, 16, 4096, 128, True),
}


class Sampler:
    """The SM clock and the power, sampled every 5 ms by NVML while it runs."""

    def __init__(self) -> None:
        uuid = str(torch.cuda.get_device_properties(0).uuid)
        self.nvml = open_nvml(uuid if uuid.startswith("GPU-") else f"GPU-{uuid}", 0)
        if self.nvml.status != "ok":
            raise SystemExit(f"injection_power.py reads the clock and power by NVML: {self.nvml.status}")
        self.clocks: list[int] = []
        self.watts: list[float] = []
        self._stop = threading.Event()

    def _run(self) -> None:
        while not self._stop.is_set():
            clock, watts = self.nvml.sm_clock_mhz(), self.nvml.power_w()
            if clock is not None and watts is not None:
                self.clocks.append(clock)
                self.watts.append(watts)
            time.sleep(0.005)

    def __enter__(self) -> Sampler:
        self.clocks, self.watts = [], []
        self._stop.clear()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: Any) -> None:
        self._stop.set()
        self._thread.join()


def per_call(fn: Callable[[], Any], seconds: float) -> float:
    """Steady-state seconds per call: ``fn`` looped for about ``seconds`` after a warm quarter, by CUDA events."""
    for _ in range(3):
        fn()
    torch.cuda.synchronize()
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < seconds / 4:
        fn()
        torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    n, t0 = 0, time.perf_counter()
    start.record()
    while time.perf_counter() - t0 < seconds:
        for _ in range(4):
            fn()
            n += 1
        torch.cuda.synchronize()
    end.record()
    end.synchronize()
    return start.elapsed_time(end) / 1e3 / n


def step_fn(name: str, backend: SDPBackend) -> Callable[[], Any]:
    b, h, s, d, causal = STEPS[name]
    q, k, v = (torch.randn(b, h, s, d, device="cuda", dtype=torch.bfloat16) for _ in range(3))

    def run() -> Any:
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal)

    return run


def filler(kind: str, size: int) -> Callable[[], Any]:
    """Extra work of a kind, its amount ``size`` (a depth, bytes/1M or cycles/1k)."""
    if kind in ("gemm-bf16", "gemm-fp32"):
        dtype = torch.bfloat16 if kind == "gemm-bf16" else torch.float32
        a = torch.randn(4096, size, device="cuda", dtype=dtype)
        b = torch.randn(size, 4096, device="cuda", dtype=dtype)
        return lambda: torch.mm(a, b)
    if kind == "copy":
        src = torch.empty(size * 1_000_000, device="cuda", dtype=torch.uint8)
        dst = torch.empty_like(src)
        return lambda: dst.copy_(src)
    if kind == "spin":
        return lambda: torch.cuda._sleep(size * 1000)
    raise ValueError(kind)


def sized(kind: str, target_s: float) -> tuple[int, float]:
    """The amount of ``kind`` whose steady-state time is closest to ``target_s`` (affine in the amount)."""
    first = {"gemm-bf16": 512, "gemm-fp32": 128, "copy": 64, "spin": 100}[kind]
    second = first * 4
    t1, t2 = (per_call(filler(kind, x), 0.2) for x in (first, second))
    slope = (t2 - t1) / (second - first)
    size = max(1, round(first + (target_s - t1) / slope))
    if kind.startswith("gemm"):
        size = max(32, 32 * round(size / 32))
    return size, per_call(filler(kind, size), 0.3)


def measure(name: str, backend: SDPBackend, share: float, seconds: float, sampler: Sampler) -> list[dict[str, Any]]:
    step = step_fn(name, backend)
    rows = []
    with sampler:
        alone = per_call(step, seconds)
    base = {"clock": statistics.mean(sampler.clocks), "watts": statistics.mean(sampler.watts)}
    rows.append({"step": name, "backend": backend.name, "extra": "none", "s": alone, **base})
    for kind in ("gemm-bf16", "gemm-fp32", "copy", "spin"):
        size, extra_s = sized(kind, share * alone)
        work = filler(kind, size)

        def both(step: Callable[[], Any] = step, work: Callable[[], Any] = work) -> None:
            step()
            work()

        with sampler:
            t = per_call(both, seconds)
        rows.append({"step": name, "backend": backend.name, "extra": kind, "size": size, "extra_alone_s": extra_s,
                     "s": t, "clock": statistics.mean(sampler.clocks), "watts": statistics.mean(sampler.watts)})
    with sampler:
        again = per_call(step, seconds)
    rows.append({"step": name, "backend": backend.name, "extra": "none-again", "s": again,
                 "clock": statistics.mean(sampler.clocks), "watts": statistics.mean(sampler.watts)})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--share", type=float, default=0.05)
    parser.add_argument("--seconds", type=float, default=1.5)
    parser.add_argument("--json", default="")
    args = parser.parse_args()
    sampler = Sampler()
    out = []
    for name in STEPS:
        for backend in (SDPBackend.CUDNN_ATTENTION, SDPBackend.FLASH_ATTENTION):
            rows = measure(name, backend, args.share, args.seconds, sampler)
            alone = rows[0]
            for r in rows:
                print(f"{name:26s} {backend.name:16s} {r['extra']:10s} {r['s'] * 1e6:9.1f} us"
                      f" {r['s'] / alone['s'] - 1:+6.1%} clock {r['clock']:6.0f}"
                      f" ({r['clock'] / alone['clock'] - 1:+5.1%})"
                      f" cycles {r['s'] * r['clock'] / (alone['s'] * alone['clock']) - 1:+6.1%} {r['watts']:5.0f} W"
                      + (f" extra alone {r['extra_alone_s'] / alone['s']:.1%}" if "extra_alone_s" in r else ""),
                      flush=True)
            out += rows
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"gpu": torch.cuda.get_device_name(0), "uuid": str(torch.cuda.get_device_properties(0).uuid),
                       "rows": out}, f, indent=1)


if __name__ == "__main__":
    main()
