"""A kernel cannot game the figure (pytest_attn.engine.spotcheck, pytest_attn.core.metrics.impossible_figure):
adversarial back ends, registered from a conftest as a user's kernel is, each failed with a message that names
its trick; an honest one passes unchanged. Before these defences, on the tiny MHA fp32 case (an honest SDPA call
~249 us on the 2-core CI machine), the always-reuse back end passed at 0.08 us ("209.7 TFLOP/s", ranked first),
the reuse-by-address one at 0.41 us, and the input writer failed with a message blaming its mask handling."""

from __future__ import annotations

from fnmatch import fnmatch

from factories import attention_suite

from pytest_attn.core.metrics import Figures, impossible_figure
from pytest_attn.engine import spotcheck

ADVERSARIES = '''
import threading
import time

import torch
import torch.nn.functional as F


class Base:
    layout = "bhsd"
    needs_cuda = False
    has_backward = False
    default_enabled = False
    empty_rows = "any"
    description = "an adversary"

    def available(self):
        return None

    def supports(self, case, device):
        return None if case.mask.kind == "none" and not case.ragged else "dense, no mask"

    def workspace_bytes(self, case):
        return 0

    def attend(self, q, k, v, case):
        return F.scaled_dot_product_attention(q, k, v, scale=case.scale, enable_gqa=case.heads_q != case.heads_kv)


class Honest(Base):
    name = "honest"

    def prepare(self, case, inputs):
        return lambda: self.attend(inputs.q, inputs.k, inputs.v, case)


class ReuseAlways(Base):
    """Computes once, then returns that output on every later call."""
    name = "reuse-always"

    def prepare(self, case, inputs):
        kept = []

        def call():
            if not kept:
                kept.append(self.attend(inputs.q, inputs.k, inputs.v, case))
            return kept[0]
        return call


class ReuseByAddress(Base):
    """Computes once per input address, then returns the stored output (a fresh tensor each time)."""
    name = "reuse-by-address"
    memo = {}

    def prepare(self, case, inputs):
        def call():
            key = (inputs.q.data_ptr(), inputs.k.data_ptr(), inputs.v.data_ptr())
            if key not in self.memo:
                self.memo[key] = self.attend(inputs.q, inputs.k, inputs.v, case)
            return self.memo[key].clone()
        return call


class ReuseJittered(Base):
    """Computes once, then hands back that tensor on every later call, nudged in place so no two match."""
    name = "reuse-jittered"

    def prepare(self, case, inputs):
        kept = []

        def call():
            if not kept:
                kept.append(self.attend(inputs.q, inputs.k, inputs.v, case))
            else:
                with torch.no_grad():
                    kept[0].add_(1e-3)
            return kept[0]
        return call


class WritesInput(Base):
    """Returns the right output, then zeroes its key input in place."""
    name = "writes-input"

    def prepare(self, case, inputs):
        def call():
            out = self.attend(inputs.q, inputs.k, inputs.v, case)
            with torch.no_grad():
                inputs.k.zero_()
            return out
        return call


class Deferred(Base):
    """Returns an empty output at once and fills it from a thread: the work happens after the timer stops."""
    name = "deferred"

    def prepare(self, case, inputs):
        def call():
            out = torch.empty(*inputs.q.shape[:-1], inputs.v.shape[-1])

            def work():
                time.sleep(0.02)
                out.copy_(self.attend(inputs.q, inputs.k, inputs.v, case))
            threading.Thread(target=work, name="deferred-work").start()
            return out
        return call


class PatchesClock(Base):
    """Replaces time.perf_counter with a clock running at a tenth of the speed."""
    name = "patches-clock"

    def prepare(self, case, inputs):
        real = time.perf_counter
        start = real()
        time.perf_counter = lambda: start + (real() - start) / 10
        return lambda: self.attend(inputs.q, inputs.k, inputs.v, case)


class Aliases(Base):
    """Writes its result into q's memory and returns q (the output aliases an input)."""
    name = "aliases"

    def prepare(self, case, inputs):
        def call():
            out = self.attend(inputs.q, inputs.k, inputs.v, case)
            with torch.no_grad():
                return inputs.q.copy_(out)
        return call


def pytest_attn_register_backends(registry, config):
    for backend in (Honest(), ReuseAlways(), ReuseByAddress(), ReuseJittered(), WritesInput(), Deferred(),
                    PatchesClock(), Aliases()):
        registry.register(backend)


@__import__("pytest").fixture(autouse=True)
def _real_clock():
    real = time.perf_counter
    yield
    time.perf_counter = real
'''

TRICKS = {
    "reuse-always": "reuse-always-* returns a stored result: at a spot check during sampling its inputs were given new"
                    " contents and it returned the same output as before*",
    "reuse-by-address": "reuse-by-address-* returns a stored result*",
    "reuse-jittered": "reuse-jittered-* returns a stored result*the tensor it returned before*",
    "writes-input": "writes-input-* writes its inputs: k changed during a call the first time it was called*",
    "deferred": "deferred-*: its output changed after the call returned (threads it started: deferred-work), the first"
                " time it was called: work left running*",
    "patches-clock": "patches-clock-*: a clock the timers read was patched while it was measured: time.perf_counter was"
                     " replaced by <function*",
    "aliases": "aliases-* returns an output that shares memory with its input q*",
}
CASE = ["-p", "no:cacheprovider", "--attn-profile=cpu", "--attn-dtypes=fp32", "--attn-directions=fwd", "-k",
        "tiny-mha-fp32-full-fwd", "--attn-baseline=off", "--attn-max-time=0.2"]


def test_every_adversary_is_failed_naming_its_trick_and_the_honest_one_passes(pytester):
    pytester.makeconftest(ADVERSARIES)
    pytester.makepyfile(test_suite=attention_suite("prefill"))
    result = pytester.runpytest(*CASE, f"--attn-backends=honest,{','.join(TRICKS)}")
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("failed") == len(TRICKS), result.stdout.str()
    result.stdout.fnmatch_lines(["  honest * cpu"])  # measured, in the summary's table
    text = result.stdout.str()
    for trick, message in TRICKS.items():
        block = text[text.index(f"_ test_attn[{trick}-"):]
        assert fnmatch(" ".join(block.split("\n")[1:8]), f"*{message}*"), (trick, block[:1500])


def test_without_the_checks_a_stored_result_is_still_timed_faster_than_possible(pytester):
    """--attn-no-verify turns the checks off; the figure itself then gives the trick away."""
    pytester.makeconftest(ADVERSARIES)
    pytester.makepyfile(test_suite=attention_suite("prefill"))
    result = pytester.runpytest(*CASE, "--attn-backends=honest,reuse-always", "--attn-no-verify")
    result.assert_outcomes(passed=1, failed=1)
    result.stdout.fnmatch_lines(["*reuse-always-tiny-mha-fp32-full-fwd is timed faster than possible: * GFLOP/s is"
                                 " *x this CPU's own matmul rate*"])


def _figures(tflops: float, **kw: object) -> Figures:
    base = dict(median_s=1e-3, tflops=tflops, fa2_tflops=tflops, tbps=1.0, arithmetic_intensity=100.0,
                mfu_datasheet=None, mfu_at_clock=None, peak_tflops=None, peak_at_clock_tflops=None,
                bandwidth_fraction=None, ridge_intensity=None, bound="compute", flops_convention="exact-mask",
                peak_source="table", peak_note="")
    base.update(kw)
    return Figures(**base)  # type: ignore[arg-type]


def test_a_figure_above_what_the_hardware_does_is_impossible_naming_the_ceiling():
    from pytest_attn.core.metrics import CeilingShare

    assert impossible_figure(_figures(600.0, mfu_at_clock=0.79, mfu_datasheet=0.61)) is None  # cuDNN on an H200
    at_clock = impossible_figure(_figures(1100.0, mfu_at_clock=1.4, peak_at_clock_tflops=785.0))
    assert at_clock == "1,100.0 TFLOP/s is 140% of this GPU's dense peak at the SM clock it ran at (785.0 TFLOP/s)"
    mine = _figures(1100.0, mfu_at_clock=1.4, peak_source="--attn-peak-tflops")
    assert impossible_figure(mine) is None  # the user's own peak: theirs
    share = CeilingShare(747.0, 1000.0 / 747.0, 4.0, 0.5)
    assert "134% of the matmul ceiling measured on this GPU (747.0 TFLOP/s)" in impossible_figure(_figures(1000.0),
                                                                                                   share)
    fast_bytes = _figures(1.0, tbps=9.0, bandwidth_fraction=1.9)
    assert "9.00 TB/s, 190% of the memory's datasheet bandwidth" in impossible_figure(fast_bytes)
    assert impossible_figure(fast_bytes, warm_l2=True) is None  # from L2 a small case beats HBM honestly
    assert impossible_figure(_figures(0.02), cpu_matmul_gflops=30.0) is None
    assert "6,990x this CPU's own matmul rate" in impossible_figure(_figures(209.7), cpu_matmul_gflops=30.0)


def test_input_digests_see_any_write_and_not_a_reread():
    import torch

    from pytest_attn.core.layouts import Inputs

    q, k, v = (torch.randn(2, 4, 16, 8) for _ in range(3))
    inputs = Inputs(q, k, v, "bhsd")
    before = spotcheck.input_digests(inputs)
    assert spotcheck.written_inputs(before, spotcheck.input_digests(inputs)) == []
    k[1, 2, 3, 4] = k[1, 2, 3, 4] + 1
    assert spotcheck.written_inputs(before, spotcheck.input_digests(inputs)) == ["k"]
    assert spotcheck.shared_input(q[0], inputs) == "q" and spotcheck.shared_input(q.clone(), inputs) is None


def test_a_replaced_clock_is_named(monkeypatch):
    import time

    assert spotcheck.clock_tampering() is None
    monkeypatch.setattr(time, "perf_counter", lambda: 0.0)
    assert spotcheck.clock_tampering().startswith("time.perf_counter was replaced by <function")


NOT_SHRUNK = """

from hypothesis import Phase, settings

import pytest_attn.fuzz.profiles  # registers ci

settings.register_profile("ci-not-shrunk", parent=settings.get_profile("ci"),
                          phases=[Phase.explicit, Phase.reuse, Phase.generate])
"""


def test_the_fuzzer_names_a_back_end_that_writes_its_inputs(pytester):
    """The fuzzer compared every element with a reference computed from the inputs the call had zeroed. (The ci
    profile without shrinking: the trick is named in the first failing example; shrinking and explaining it took
    80 % of this test's time, and what a failure shrinks to is test_strategies' business.)"""
    pytester.makeconftest(ADVERSARIES + NOT_SHRUNK)
    pytester.makepyfile(test_fuzz_mine="""
def test_right(attn_fuzzer):
    attn_fuzzer.run("writes-input", "fwd")
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "--hypothesis-profile=ci-not-shrunk",
                                "--attn-fuzz-examples=3")
    result.assert_outcomes(failed=1)
    result.stdout.fnmatch_lines(["writes-input gives a wrong result on *",
                                 "  call: writes its inputs: k changed during a call in this example*"])


def test_spot_checks_cost_a_bounded_share_and_a_fast_call_always_gets_them():
    """Two calls a check: a 230 ms HunyuanVideo forward under a 3 s cap gets none (they would add 30 %), a 15 us
    decode step two -- and so does anything timed at 0.08 us."""
    assert spotcheck.spot_count(0.23, 3.0) == 0
    assert spotcheck.spot_count(0.03, 3.0) == 1
    assert spotcheck.spot_count(15e-6, 1.0) == 2 and spotcheck.spot_count(8e-8, 0.5) == 2
    assert spotcheck.spot_count(0.0, 0.5) == 2


def test_a_spot_check_compares_a_few_sequences_of_a_large_batch(monkeypatch):
    """The reference's cost grows with the sequences it checks: on an H100, two spot checks of all 64 sequences of a
    1.4 ms decode step took 0.5 s, of a 256-sequence serving step 0.8-1.2 s. A spot check takes at most
    SPOT_SEQUENCES of them, drawn afresh each time; a batch smaller than that is checked whole."""
    from types import SimpleNamespace

    from pytest_attn.oracle.checks import RowCheck

    seen = []

    def rows(case, inputs, out, layout, **kw):
        seen.append(kw["sequences"])
        return RowCheck(True, 0.0, 0.0, 1.0, 2, "")

    monkeypatch.setattr(spotcheck, "check_rows", rows)
    for batch in (256, 3):
        check = spotcheck.SpotCheck(SimpleNamespace(batch=batch), lambda: None, None, None, "bshd")
        check._check_result(None, (0, 0))
    assert len(seen[0]) == spotcheck.SPOT_SEQUENCES and set(seen[0]) <= set(range(256)) and seen[1] == [0, 1, 2]


def test_a_spot_check_keeps_an_mla_cases_values_its_keys_first_columns():
    """The reference reads a latent case's values from its keys; drawn apart by the redraw, a back end reading v
    (sdpa-loop) read 0.722 off at a spot check on an H200, though right."""
    import torch

    from pytest_attn.core.adhoc import parse_case
    from pytest_attn.engine.inputs import make_inputs

    case = parse_case("batch=2,seqlen_q=1,seqlen_k=16,heads=4,kv_heads=1,head_dim=24,head_dim_v=16,latent").case(
        "sdpa-loop")
    inputs = make_inputs(case, "thd", "cpu")
    before = inputs.k.clone()
    spotcheck.redraw(inputs, case, seed=5)
    assert not torch.equal(inputs.k, before)
    assert torch.equal(inputs.v, inputs.k[..., :16])
