"""What tracing an A/B block's samples together costs and gives, on a GPU. For a few decode steps and GPT-2 small
(FA2 and cuDNN), an A/B worker (:class:`pytest_attn.engine.ab.worker.Arm`) prepares each case as an arm does; this
prints whether one trace of several samples cuts into samples (:func:`pytest_attn.engine.profiler.split_samples`),
and the host time of 1, 10 and 100 samples in one trace against 10 traced one by one, with their medians.

    PYTHONPATH=. python scripts/ab_trace_cost.py      # on a GPU machine, flash-attn installed

Run on an H100 (2026-11-26): every case cut cleanly; 10 samples in one trace took 17-36 ms, one by one 36-60 ms,
with the same medians; 100 in one trace 150-440 ms (docs/ab.md).
"""

from __future__ import annotations

import time
from collections.abc import Callable

from pytest_attn.core.catalog import profile_variants
from pytest_attn.core.codec import case_to_dict
from pytest_attn.engine.ab.messages import Block, Hello, Prepare
from pytest_attn.engine.ab.worker import Arm, settings_to_json
from pytest_attn.engine.probe import probe_device
from pytest_attn.engine.profiler import device_activity, split_samples
from pytest_attn.engine.runner import RunSettings


def timed(run: Callable[[], list[float]]) -> tuple[float, float]:
    """(host seconds, median sample) of one call of ``run``."""
    t0 = time.perf_counter()
    samples = sorted(run())
    return time.perf_counter() - t0, samples[len(samples) // 2]


def main() -> None:
    arm = Arm(probe_device)
    print(arm.hello(Hello(settings_to_json(RunSettings()))))
    variants = profile_variants("default")
    chosen = [v for v in variants if v.shape.decode][:3] + \
        [v for v in variants if "gpt2" in str(v.shape) and v.direction == "fwd"][:1]
    for variant in chosen:
        for backend in ("flash-attn", "sdpa-cudnn"):
            case = variant.case(backend)
            answer = arm.prepare(Prepare(case_to_dict(case), case.id))
            if not answer.ok or arm.ready is None:
                print(case.id, "not prepared:", answer.skip or answer.fail)
                continue
            timer = arm.ready.built.timer
            inner = getattr(timer, "inner", None)
            print("==", case.id, answer.timer, "calls/sample", answer.calls_per_sample,
                  "inner", inner.kind if inner else None)
            if inner is None or not hasattr(timer, "samples"):
                continue
            flush = timer._flush_names
            one = device_activity(inner.sample)
            print("  one sample:", len(one), "activities;", sorted({name[:60] for name, _ in one}))
            together = device_activity(lambda inner=inner: [inner.sample() for _ in range(3)])
            print("  3 together:", len(together), "activities; cut:", split_samples(together, flush, 3))
            for n in (1, 10, 100):
                wall, mid = timed(lambda n=n, timer=timer: timer.samples(n))
                print(f"  samples({n}): wall {wall * 1e3:.1f} ms, median {mid * 1e6:.2f} us")
            wall, mid = timed(lambda timer=timer: [timer.sample() for _ in range(10)])
            print(f"  10 x sample(): wall {wall * 1e3:.1f} ms, median {mid * 1e6:.2f} us")
            print(f"  block(50): wall {arm.block(Block(50, True)).wall_s * 1e3:.1f} ms")


if __name__ == "__main__":
    main()
