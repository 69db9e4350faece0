"""One fuzz example end to end -- inputs from a seed, one call (and the backward for fwd+bwd), every
element checked against the oracle -- and the failure report with its replay command. No Hypothesis here:
the known-failure ledger's suite and the replay use it without importing it (1-2 s)."""

from __future__ import annotations

import dataclasses
from typing import Any

from ..backends.base import Backend
from ..core.case import AttnCase
from ..core.codec import case_json
from ..core.device import DeviceInfo
from ..engine.inputs import make_inputs, torch_device
from ..engine.settings import CaseFailed
from ..engine.spotcheck import watched_call
from ..oracle.cache import check_cache
from ..oracle.checks import FullCheck, check_full


def poison_allocator(device: Any, nbytes: int) -> None:
    """Fill memory the caching allocator will hand out next with NaN, so an output element the back
    end never writes reads NaN instead of a stale, possibly correct, value from an earlier call."""
    import torch

    if nbytes <= 0:
        return
    block = torch.empty(nbytes // 4 + 1, dtype=torch.float32, device=device)
    block.fill_(float("nan"))
    del block


def run_example(case: AttnCase, backend: Backend, device: DeviceInfo, seed: int) -> FullCheck:
    """Inputs from ``seed``, one call (and backward for fwd+bwd), every element checked. Raises
    :class:`Unsupported` when the back end refuses the case."""
    import torch

    dev = torch_device(device)
    grad = case.direction == "fwd+bwd"
    inputs = make_inputs(case, backend.layout, dev, requires_grad=grad, seed=seed)
    forward = backend.prepare(case, inputs)
    out_bytes = case.total_q * case.heads_q * case.head_dim_v * 4
    poison_allocator(dev, 4 * out_bytes)
    try:  # its inputs left as they were, not aliased, its work done when it returns
        out, _ = watched_call(forward, inputs, device, case, "in this example")
    except CaseFailed as exc:
        return FullCheck(False, "call", 0.0, 0.0, 0.0, "", problem=str(exc).removeprefix(case.id).lstrip(": "))
    grads = None
    if grad:
        if not out.requires_grad:  # torch.autograd.grad would raise "does not require grad"
            return FullCheck(False, "dq", 0.0, 0.0, 0.0, "every element", problem=(
                "the output has no autograd graph back to q, k and v (computed without them, or detached), so it"
                " has no gradient; a back end without a backward declares has_backward = False"))
        poison_allocator(dev, 4 * out_bytes)
        used = torch.autograd.grad(out, (inputs.q, inputs.k, inputs.v), inputs.grad_out, allow_unused=True)
        # an input the output does not depend on has a zero gradient, which the check then compares
        dq, dk, dv = (torch.zeros_like(x) if g is None else g
                      for g, x in zip(used, (inputs.q, inputs.k, inputs.v), strict=True))
        grads = (dq, dk, dv)
    if device.is_cuda:
        torch.cuda.synchronize(dev)
    checked = check_full(case, inputs, out, backend.layout, grads, empty_rows=getattr(backend, "empty_rows", "any"))
    view = getattr(forward, "cache", None)
    problem = check_cache(case, inputs.k, inputs.v, view) if view is not None else None
    if problem:  # the output may be right while the cache it leaves behind is not
        return dataclasses.replace(checked, ok=False, tensor="kv cache", problem=problem, worst="the end of the call")
    return checked


def replay_command(case: AttnCase, seed: int, origin: str | None = None) -> str:
    """The command that reruns one example on this machine; ``origin``: the file that registered a back end
    that is neither built in nor an entry point (a conftest), loaded by the replay."""
    source = f" --backends-from {_shown(origin)}" if origin else ""
    return f"PYTHONPATH=. python -m pytest_attn.fuzz{source} '{case_json(case, seed)}'"


def _shown(path: str) -> str:
    """``path`` relative to the working folder where it is inside it (the command is run from there)."""
    import os

    relative = os.path.relpath(path)
    return path if relative.startswith("..") else relative


def failure_message(case: AttnCase, seed: int, check: FullCheck, origin: str | None = None) -> str:
    return (
        f"{case.backend} gives a wrong result on {case.describe()} (scale {case.scale:.4g}, seed {seed}):\n"
        f"  {check.describe(case)}\n"
        f"  replay: {replay_command(case, seed, origin)}"
    )


class FuzzFailure(AssertionError):
    """A wrong result the fuzzer found: ``report`` is :func:`failure_message` (Hypothesis adds its notes --
    the shrunk draws, the explanation -- to the exception, after it)."""

    def __init__(self, report: str) -> None:
        super().__init__(report)
        self.report = report
