"""A back end timed on a fake clock, for tests that assert verdicts (SAME, SLOWER, ...) of real pytest sessions: a
loaded machine moves a real CPU case's time by 2x and more between runs (a 300 % injected slowdown read +145 %
AMBIGUOUS), so such a test runs ``steady`` -- SDPA math whose every call advances the clock the CPU timer reads by
a steady 4-6 ms (+-0.2 %; :func:`steady_conftest` sets it) -- in a suite of prefill and decode cases
(:func:`steady_suite`), and an injected slowdown whose calibrated work advances the clock too. On a CPU the warm-up's
and the sampling's time caps read that clock too (not 1 ms a call: the warm-up takes 0.05 s of it, each call a real
SDPA call)."""

from __future__ import annotations

from pytest_attn.engine import slowed, timers

_STEADY = '''
import os
import random

import torch.nn.functional as F

from pytest_attn.engine import timers


class Steady:
    """SDPA math, timed on the fake clock: SECONDS s per call (x (1 + queries / 1000)) and a little, +-0.2 %."""

    description = "SDPA math on a fake clock"
    layout = "bhsd"
    needs_cuda = False
    has_backward = False
    default_enabled = False
    empty_rows = "any"

    def __init__(self, name="steady", broken=""):
        self.name, self.broken = name, broken

    def available(self):
        return os.environ.get(self.broken) if self.broken else None

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
        base = SECONDS * (1 + case.total_q / 1000) * float(os.environ.get("TIMES_SLOWER", "1"))

        def forward():
            ADVANCE
            return F.scaled_dot_product_attention(q, k, v, is_causal=causal, scale=case.scale,
                                                  enable_gqa=case.heads_q != case.heads_kv)

        return forward


def pytest_attn_register_backends(registry, config):
    registry.register(Steady())
'''


def steady_conftest(ms: float | None = 4.0, twin: str = "") -> str:
    """A conftest that registers ``steady``: SDPA math whose every call advances the fake clock by ``ms`` (x (1 +
    queries / 1000), +-0.2 %, x ``TIMES_SLOWER``); ``None``: no fake clock (a process of its own reads the real
    one). ``twin``: also ``other``, the same back end, whose library fails its import where that environment
    variable is set (its value says why)."""
    seconds = repr((ms or 0.0) / 1000)
    advance = "timers.CPU_CLOCK.advance(base * (1 + rng.gauss(0, 0.002)))" if ms is not None else "pass"
    text = _STEADY.replace("SECONDS", seconds).replace("ADVANCE", advance)
    if twin:
        text += f"    registry.register(Steady(\"other\", broken={twin!r}))\n"
    return text


STEADY_CONFTEST = steady_conftest()


def steady_suite(stop: bool = True) -> str:
    """A suite of the ``case`` (prefill) and ``decode_case`` tests; ``stop``: a ``test_stop`` between them that
    does what ``STOP_HERE`` says (``ctrl-c``, ``fail``, ``abort`` as a kernel library's abort(), ``exit`` as a
    pytest-xdist worker killed)."""
    head = '''
import os

from pytest_attn.plugin import attn_cases


def pytest_generate_tests(metafunc):
    for name, kind in (("case", "prefill"), ("decode_case", "decode")):
        if name in metafunc.fixturenames:
            cases = attn_cases(metafunc.config, kind)
            metafunc.parametrize(name, cases, ids=[c.id for c in cases])


def test_attn(attn_bench, case):
    attn_bench(case)
'''
    halt = '''

def test_stop():
    if os.environ.get("STOP_HERE") == "ctrl-c":
        raise KeyboardInterrupt
    if os.environ.get("STOP_HERE") == "abort":
        os.abort()
    if os.environ.get("STOP_HERE") == "exit":
        os._exit(1)
    assert os.environ.get("STOP_HERE") != "fail"
'''
    tail = '''

def test_decode(attn_bench, decode_case):
    attn_bench(decode_case)
'''
    return head + (halt if stop else "") + tail


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
