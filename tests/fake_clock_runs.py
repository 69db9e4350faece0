"""A back end timed on a fake clock, for tests that assert verdicts (SAME, SLOWER, ...) of real pytest sessions: a
loaded machine moves a real CPU case's time by 2x and more between runs (a 300 % injected slowdown read +145 %
AMBIGUOUS), so such a test runs ``steady`` -- SDPA math whose every call advances the clock the CPU timer reads by
a steady 4-6 ms (+-0.2 %) -- and an injected slowdown whose calibrated work advances it too. On a CPU the warm-up's
and the sampling's time caps read that clock too (not 1 ms a call: the warm-up takes 0.05 s of it, each call a real
SDPA call)."""

from __future__ import annotations

from pytest_attn.engine import slowed, timers

STEADY_CONFTEST = '''
import os
import random

import torch.nn.functional as F

from pytest_attn.engine import timers


class Steady:
    """SDPA math, timed on the fake clock: 4 ms per call and a little, +-0.2 %."""

    name = "steady"
    description = "SDPA math on a fake clock"
    layout = "bhsd"
    needs_cuda = False
    has_backward = False
    default_enabled = False
    empty_rows = "any"

    def available(self):
        return None

    def supports(self, case, device):
        if case.dtype != "fp32" or case.ragged or case.mask.kind not in ("none", "causal"):
            return "fp32, dense, no mask or causal only"
        if case.mask.kind == "causal" and case.seqlens_q != case.seqlens_k and max(case.seqlens_q) > 1:
            return "SDPA's is_causal is top-left aligned"
        return None

    def workspace_bytes(self, case):
        return 0

    def prepare(self, case, inputs):
        rng = random.Random(case.id)
        q, k, v = inputs.q, inputs.k, inputs.v
        causal = case.mask.kind == "causal" and case.seqlens_q == case.seqlens_k  # one query sees every key
        base = 4e-3 * (1 + case.total_q / 1000) * float(os.environ.get("TIMES_SLOWER", "1"))

        def forward():
            timers.CPU_CLOCK.advance(base * (1 + rng.gauss(0, 0.002)))
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=case.scale,
                                                  enable_gqa=case.heads_q != case.heads_kv)

        return forward


def pytest_attn_register_backends(registry, config):
    registry.register(Steady())
'''


class ClockWork:
    """The injection's matmuls on the fake clock: a side x depth x side product takes 1e-13 x side^2 x depth seconds."""

    def __init__(self, clock):
        self.clock = clock

    def product_seconds(self, side, depth):
        return 1e-13 * side**2 * depth

    def runner(self, plan):
        return lambda: self.clock.advance(plan.repeats * self.product_seconds(plan.side, plan.depth))

    def step_seconds(self, step):
        t0 = self.clock()
        step()
        return self.clock() - t0


def on_the_fake_clock(monkeypatch, clock) -> None:
    """The CPU timer and the injected slowdown's work read ``clock`` (conftest's ``fake_clock``) for this test."""
    monkeypatch.setattr(timers, "CPU_CLOCK", clock)
    monkeypatch.setattr(slowed, "WORK_FACTORY", lambda device: ClockWork(clock))
