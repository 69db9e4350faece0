"""A kernel cannot game the figure on a GPU either: the tricks only a GPU has -- work on a side stream the timed
stream does not wait for, an output returned before it is written, a call a CUDA graph does not capture, a patched
``torch.cuda.Event.elapsed_time`` -- each failed with a message that names it, and an honest back end measured
unchanged, on one case of the smoke profile (Llama-3-8B prefill, causal fwd, bf16: some 800 us a call on an H100).
The events and graph timers are proved too: forced onto the side-stream back end with the checks off, the graph
refuses to capture it and the events' figure is failed as faster than possible. (A first H100 run: the side
stream passed, timed by its kernels -- CUPTI reads every stream -- with a note that capture had failed; the
output check at return did not see it, as the GPU ran the check's reads after the side stream's kernel.)

Skipped without a CUDA GPU (CI has none): run on one with ``pytest tests/test_gaming_gpu.py -p no:xdist``."""

from __future__ import annotations

from fnmatch import fnmatch

import pytest
from factories import attention_suite

ADVERSARIES = '''
import torch
import torch.nn.functional as F


class Base:
    layout = "bhsd"
    needs_cuda = True
    has_backward = False
    default_enabled = False
    empty_rows = "any"
    description = "an adversary"

    def available(self):
        return None

    def supports(self, case, device):
        return None if case.mask.kind in ("none", "causal") and not case.ragged else "dense, no mask or causal"

    def workspace_bytes(self, case):
        return 0

    def attend(self, q, k, v, case):
        return F.scaled_dot_product_attention(q, k, v, scale=case.scale, is_causal=case.mask.kind == "causal",
                                              enable_gqa=case.heads_q != case.heads_kv)


class Honest(Base):
    name = "honest-gpu"

    def prepare(self, case, inputs):
        return lambda: self.attend(inputs.q, inputs.k, inputs.v, case)


class SideStream(Base):
    """Computes on a stream of its own, which the caller's stream never waits for."""
    name = "side-stream"

    def prepare(self, case, inputs):
        side = torch.cuda.Stream()

        def call():
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                return self.attend(inputs.q, inputs.k, inputs.v, case)
        return call


class EarlyReturn(Base):
    """Returns its output tensor at once; a side stream waits a while, then writes the result into it."""
    name = "early-return"

    def prepare(self, case, inputs):
        side = torch.cuda.Stream()

        def call():
            out = torch.empty_like(inputs.q)
            side.wait_stream(torch.cuda.current_stream())
            with torch.cuda.stream(side):
                torch.cuda._sleep(1_000_000)
                out.copy_(self.attend(inputs.q, inputs.k, inputs.v, case))
            out.record_stream(side)
            return out
        return call


class GraphInvisible(Base):
    """Computes only when no CUDA graph is being captured; while one is, hands back its last output."""
    name = "graph-invisible"

    def prepare(self, case, inputs):
        kept = []

        def call():
            if torch.cuda.is_current_stream_capturing() and kept:
                return kept[0]
            kept[:] = [self.attend(inputs.q, inputs.k, inputs.v, case)]
            return kept[0]
        return call


class PatchesEvents(Base):
    """Makes torch.cuda.Event.elapsed_time read a tenth of the time."""
    name = "patches-events"

    def prepare(self, case, inputs):
        real = torch.cuda.Event.elapsed_time
        torch.cuda.Event.elapsed_time = lambda start, end: real(start, end) / 10
        return lambda: self.attend(inputs.q, inputs.k, inputs.v, case)


class ReuseAlways(Base):
    """Computes once, then returns that output on every later call."""
    name = "reuse-always-gpu"

    def prepare(self, case, inputs):
        kept = []

        def call():
            if not kept:
                kept.append(self.attend(inputs.q, inputs.k, inputs.v, case))
            return kept[0]
        return call


def pytest_attn_register_backends(registry, config):
    for backend in (Honest(), SideStream(), EarlyReturn(), GraphInvisible(), PatchesEvents(), ReuseAlways()):
        registry.register(backend)


@__import__("pytest").fixture(autouse=True)
def _real_events():
    real = torch.cuda.Event.elapsed_time
    yield
    torch.cuda.Event.elapsed_time = real
'''

TRICKS = {
    "side-stream": "side-stream-*: not timed: the call leaves work on another stream that its own stream does not"
                   " wait for*",
    "early-return": "early-return-*: its output changed after the call returned*the first time it was called: work"
                    " left running*",
    "graph-invisible": "graph-invisible-*not timed: *",
    "patches-events": "patches-events-*: a clock the timers read was patched while it was measured:"
                      " torch.cuda.Event.elapsed_time was replaced by*",
    "reuse-always-gpu": "reuse-always-gpu-* returns a stored result*",
}
CASE = ["-p", "pytest_attn.plugin", "-p", "no:cacheprovider", "-p", "no:xdist", "--attn-profile=smoke",
        "--attn-dtypes=bf16", "--attn-directions=fwd", "-k", "llama3-8b-prefill-bf16-causal-fwd", "--attn-baseline=off",
        "--attn-max-time=0.5"]


@pytest.fixture
def gpu():
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU: these back ends' tricks exist only there (run on a GPU machine)")


def _message(text: str, backend: str) -> str:
    block = text[text.index(f"_ test_attn[{backend}-"):]
    return " ".join(block.split("\n")[1:10])


def test_every_gpu_adversary_is_failed_naming_its_trick_and_the_honest_one_passes(gpu, pytester):
    pytester.makeconftest(ADVERSARIES)
    pytester.makepyfile(test_suite=attention_suite("prefill"))
    result = pytester.runpytest(*CASE, f"--attn-backends=honest-gpu,{','.join(TRICKS)}")
    text = result.stdout.str()
    print(text)  # the messages, for the closing note
    outcomes = result.parseoutcomes()
    assert outcomes.get("passed") == 1 and outcomes.get("failed") == len(TRICKS), text
    for trick, message in TRICKS.items():
        assert fnmatch(_message(text, trick), f"*{message}*"), (trick, _message(text, trick))


@pytest.mark.parametrize(("timer", "message"), [
    ("cuda-graph", "side-stream-*: not timed: the call leaves work on another stream*"),
    ("cuda-event", "side-stream-* is timed faster than possible: *"),
])
def test_the_graph_and_event_timers_do_not_pass_work_on_a_side_stream(gpu, pytester, timer, message):
    """With the checks off (``--attn-no-verify``), the timers themselves: a graph cannot capture work its stream
    does not join, and the case fails naming it; a pair of events around the call times its launch alone, which
    the impossible-figure check fails, naming the ceiling."""
    pytester.makeconftest(ADVERSARIES)
    pytester.makepyfile(test_suite=attention_suite("prefill"))
    result = pytester.runpytest(*CASE, "--attn-backends=honest-gpu,side-stream", "--attn-no-verify",
                                f"--attn-timer={timer}")
    text = result.stdout.str()
    print(text)
    result.assert_outcomes(passed=1, failed=1)
    assert fnmatch(_message(text, "side-stream"), message), _message(text, "side-stream")
