"""The deliberate slowdown that proves the gate (pytest_attn.engine.slowed), on the CPU."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from pytest_attn.backends import builtin_registry  # noqa: E402
from pytest_attn.core.case import AttnCase  # noqa: E402
from pytest_attn.engine import slowed  # noqa: E402
from pytest_attn.engine.inputs import make_inputs  # noqa: E402


@pytest.mark.parametrize("direction", ["fwd", "fwd+bwd"])
def test_injected_slowdown_is_a_fraction_of_the_whole_timed_step(monkeypatch, direction):
    # a first H200 run calibrated the wait on the forward alone: fwd+bwd cases slowed by 1-2 %, not 6 %
    timed = []
    monkeypatch.setattr(slowed, "_time_once", lambda fn, cuda: timed.append(fn()) or 0.0)
    case = AttnCase.dense(backend="sdpa-math", shape="t", batch=1, seqlen_q=4, heads_q=2, head_dim=8, dtype="fp32",
                          direction=direction)
    inner = builtin_registry().get("sdpa-math")
    inputs = make_inputs(case, inner.layout, torch.device("cpu"), requires_grad=direction == "fwd+bwd", seed=0)
    slowed.SlowedBackend(inner, 0.06).prepare(case, inputs)
    if direction == "fwd":
        assert isinstance(timed[0], torch.Tensor)  # the forward's output
    else:
        grads = timed[0]  # dq, dk, dv
        assert [g.shape for g in grads] == [inputs.q.shape, inputs.k.shape, inputs.v.shape]
