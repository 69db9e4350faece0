"""Input tensors for a case, in the layout a back end takes (:mod:`pytest_attn.core.layouts`), on the
device a :class:`~pytest_attn.core.device.DeviceInfo` names, and the step a sample times (the forward,
or forward and backward). Each back end gets its inputs contiguous in its own layout, so no layout
copy lands in the timed call. GPU or CPU I/O; torch is imported inside each function.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from ..core.case import AttnCase
from ..core.device import DeviceInfo
from ..core.layouts import LAYOUTS, Inputs, torch_dtype

if TYPE_CHECKING:
    import torch


def torch_device(device: DeviceInfo) -> torch.device:
    """The torch device a :class:`DeviceInfo` names (the one place this is decided)."""
    import torch

    return torch.device("cuda", device.index or 0) if device.is_cuda else torch.device("cpu")

def _cu_seqlens(lengths: tuple[int, ...], device: torch.device | str) -> torch.Tensor:
    import torch

    cu = [0]
    for n in lengths:
        cu.append(cu[-1] + n)
    return torch.tensor(cu, dtype=torch.int32, device=device)


def _randn(shape: tuple[int, ...], case: AttnCase, device: torch.device | str, gen: torch.Generator) -> torch.Tensor:
    import torch

    # Draw in fp32 then cast: fp8 has no randn, and every dtype then sees the same values.
    # Never zeros: they hide unwritten outputs and can run faster than real data.
    return torch.randn(shape, generator=gen, device=device, dtype=torch.float32).to(torch_dtype(case.dtype))


#: The largest finite float8_e4m3fn value: a per-tensor scale maps a tensor's largest |element| to it.
E4M3_MAX = 448.0


def _quantised(t: torch.Tensor) -> tuple[torch.Tensor, float]:
    """``t`` (fp32) as e4m3 with its per-tensor scale (amax / 448, the usual choice): ``q.float() * scale ~ t``."""
    import torch

    scale = float(t.abs().max()) / E4M3_MAX or 1.0
    return (t / scale).to(torch.float8_e4m3fn), scale


def _lay_out(t: torch.Tensor, layout: str, batch: int) -> torch.Tensor:
    if layout == "thd":
        return t
    bshd = t.view(batch, t.shape[0] // batch, *t.shape[1:])
    return bshd if layout == "bshd" else bshd.transpose(1, 2).contiguous()


def make_inputs(
    case: AttnCase,
    layout: str,
    device: torch.device | str,
    *,
    requires_grad: bool = False,
    seed: int = 0,
) -> Inputs:
    """Random q, k, v (and dO for fwd+bwd) for ``case`` in ``layout`` on ``device``."""
    import torch

    if layout not in LAYOUTS:
        raise ValueError(f"layout={layout!r} is not one of {', '.join(LAYOUTS)}")
    if layout != "thd" and case.ragged:
        raise ValueError(f"{case.id}: a ragged batch needs the packed 'thd' layout, not {layout!r}")
    gen = torch.Generator(device=device)
    gen.manual_seed(seed)
    hq, hk, dqk, dv = case.heads_q, case.heads_kv, case.head_dim_qk, case.head_dim_v
    # Drawn packed, then laid out: one seed gives the same values in every layout, so outputs of
    # back ends with different layouts can be compared element by element.
    packed = [(case.total_q, hq, dqk), (case.total_k, hk, dqk), (case.total_k, hk, dv), (case.total_q, hq, dv)]
    drawn = [_randn(s, case, device, gen) for s in packed[: 4 if case.direction == "fwd+bwd" else 3]]
    # The forms draw after the plain tensors, so a plain case's values do not move.
    sinks = None
    if case.sinks:  # fp32 logits that bf16 holds exactly: FA4 takes them in bf16, FlashInfer in fp32, alike
        sinks = torch.randn(hq, generator=gen, device=device, dtype=torch.float32).to(torch.bfloat16).float()
    scales = (1.0, 1.0)
    if case.kv_dtype == "fp8":
        (drawn[1], k_scale), (drawn[2], v_scale) = (_quantised(drawn[i].float()) for i in (1, 2))
        scales = (k_scale, v_scale)
    if case.latent_kv:  # the values are the key's first head_dim_v columns (its own copy, contiguous)
        drawn[2] = drawn[1][..., :dv].contiguous()
        scales = (scales[0], scales[0])
    q, k, v, *rest = (_lay_out(t, layout, case.batch) for t in drawn)
    grad_out = rest[0] if rest else None
    if requires_grad:
        for t in (q, k, v):
            t.requires_grad_(True)
    inputs = Inputs(q, k, v, layout, grad_out=grad_out, sinks=sinks, k_scale=scales[0], v_scale=scales[1])
    if layout == "thd":
        inputs.cu_seqlens_q = _cu_seqlens(case.seqlens_q, device)
        inputs.cu_seqlens_k = _cu_seqlens(case.seqlens_k, device)
    return inputs


def make_step(case: AttnCase, forward: Any, inputs: Inputs) -> Any:
    """What one sample times: the forward, or for fwd+bwd the forward and the gradients of q, k, v."""
    if case.direction == "fwd":
        return forward
    import torch

    tensors = (inputs.q, inputs.k, inputs.v)
    grad_out = inputs.grad_out

    def step() -> Any:
        return torch.autograd.grad(forward(), tensors, grad_out)

    return step
