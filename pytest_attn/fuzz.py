"""Correctness fuzzing of one back end: what it can be fuzzed with, one example end to end, the
failure report, and a command that replays a failure.

``python -m pytest_attn.fuzz '<case json>'`` re-runs one example (the JSON a failure prints) on this
machine and prints the check; exit status 1 when it fails.
"""

from __future__ import annotations

import json
import sys
from typing import TYPE_CHECKING, Any

from .backends.base import Unsupported
from .case import AttnCase
from .reference import FullCheck, check_full
from .strategies import Space, mask_from_id

if TYPE_CHECKING:
    from .backends.base import Backend
    from .device import DeviceInfo

CPU_HEAD_DIMS = (8, 16, 24, 32, 40, 64)
GPU_HEAD_DIMS = (16, 32, 40, 64, 72, 80, 96, 128, 256)


def _refusal(backend: Backend, device: DeviceInfo, **fields: Any) -> str | None:
    """Why ``backend`` refuses a small probe case with ``fields`` changed, or None."""
    base: dict[str, Any] = dict(backend=backend.name, shape="probe", seqlens_q=(8,), seqlens_k=(8,), heads_q=2,
                                heads_kv=2, head_dim_qk=32, head_dim_v=32, dtype="bf16" if device.is_cuda else "fp32")
    base.update(fields)
    try:
        return backend.supports(AttnCase(**base), device)
    except Exception as exc:
        return f"{type(exc).__name__}: {exc}"


def _probe(backend: Backend, device: DeviceInfo, **fields: Any) -> bool:
    return _refusal(backend, device, **fields) is None


def probe_space(
    backend: Backend,
    device: DeviceInfo,
    direction: str,
    *,
    dtypes: tuple[str, ...] | None = None,
    head_dims: tuple[int, ...] | None = None,
) -> Space | str:
    """What ``backend`` takes, found by asking its ``supports()`` about small probe cases; or why it
    cannot be fuzzed here."""
    from .case import Mask
    from .masks import prefix_lm, random_block_sparse

    if backend.needs_cuda and not device.is_cuda:
        return "no CUDA device"
    why = backend.available()
    if why:
        return why
    if direction == "fwd+bwd" and not backend.has_backward:
        return f"{backend.name} has no backward pass"
    shape: dict[str, Any] = {}
    if _refusal(backend, device, head_dim_qk=64, head_dim_v=64, dtype="bf16") and _probe(
            backend, device, seqlens_q=(1,), seqlens_k=(8,), head_dim_qk=64, head_dim_v=64, dtype="bf16"):
        shape = {"seqlens_q": (1,), "seqlens_k": (8,)}  # a decode-only back end: one query per sequence
    dt_candidates = dtypes or (("fp16", "bf16", "fp32") if device.is_cuda else ("fp32", "bf16"))
    ok_dtypes = tuple(d for d in dt_candidates if _probe(backend, device, dtype=d, head_dim_qk=64, head_dim_v=64,
                                                         **shape))
    if not ok_dtypes:
        why = _refusal(backend, device, dtype=dt_candidates[0], head_dim_qk=64, head_dim_v=64, **shape)
        return f"{backend.name} cannot be fuzzed with small cases of {', '.join(dt_candidates)}: {why}"
    dt = ok_dtypes[0]
    dims = head_dims or (GPU_HEAD_DIMS if device.is_cuda else CPU_HEAD_DIMS)
    ok_dims = tuple(d for d in dims if _probe(backend, device, dtype=dt, head_dim_qk=d, head_dim_v=d, **shape))
    if not ok_dims:
        return f"{backend.name} takes none of the head dims {', '.join(map(str, dims))}"
    d = ok_dims[0]
    common: dict[str, Any] = dict(dtype=dt, head_dim_qk=d, head_dim_v=d, **shape)
    masks = {"none": Mask.none(), "causal": Mask.causal(), "window": Mask.window(3, 2),
             "blocksparse": random_block_sparse(4, 0.5), "prefixlm": prefix_lm(2)}
    kinds = tuple(k for k, m in masks.items() if _probe(backend, device, mask=m, **common))
    plain = {k: v for k, v in common.items() if k not in ("seqlens_q", "seqlens_k")}
    q_longer = _probe(backend, device, seqlens_q=(8,), seqlens_k=(5,), mask=Mask.causal(), **plain)
    empty_rows = getattr(backend, "empty_rows", "any")
    two = {"seqlens_q": (1, 1), "seqlens_k": (3, 8)} if shape else {"seqlens_q": (3, 8), "seqlens_k": (3, 8)}
    return Space(
        dtypes=ok_dtypes,
        head_dims=ok_dims,
        mask_kinds=kinds or ("none",),
        ragged=_probe(backend, device, **{**plain, **two}),
        gqa=_probe(backend, device, heads_q=4, heads_kv=2, **common),
        cross=bool(shape) or _probe(backend, device, seqlens_q=(4,), seqlens_k=(9,), mask=Mask.causal(), **plain),
        queries=1 if shape else None,
        q_longer=q_longer and empty_rows != "any",
        max_len=300 if device.is_cuda else 129,
        long=device.is_cuda,
    )


def case_json(case: AttnCase, seed: int) -> str:
    """One line that names the example completely (see :func:`case_from_json`)."""
    return json.dumps({
        "backend": case.backend, "seqlens_q": list(case.seqlens_q), "seqlens_k": list(case.seqlens_k),
        "heads_q": case.heads_q, "heads_kv": case.heads_kv, "head_dim_qk": case.head_dim_qk,
        "head_dim_v": case.head_dim_v, "dtype": case.dtype, "mask": case.mask.id, "direction": case.direction,
        "softmax_scale": case.softmax_scale, "seed": seed,
    }, separators=(",", ":"))


def case_from_json(text: str) -> tuple[AttnCase, int]:
    data = json.loads(text)
    seed = int(data.pop("seed", 0))
    data["seqlens_q"], data["seqlens_k"] = tuple(data["seqlens_q"]), tuple(data["seqlens_k"])
    data["mask"] = mask_from_id(data["mask"])
    return AttnCase(shape="fuzz", **data), seed


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

    from .inputs import make_inputs

    dev = torch.device("cuda", device.index or 0) if device.is_cuda else torch.device("cpu")
    grad = case.direction == "fwd+bwd"
    inputs = make_inputs(case, backend.layout, dev, requires_grad=grad, seed=seed)
    forward = backend.prepare(case, inputs)
    out_bytes = case.total_q * case.heads_q * case.head_dim_v * 4
    poison_allocator(dev, 4 * out_bytes)
    out = forward()
    grads = None
    if grad:
        poison_allocator(dev, 4 * out_bytes)
        dq, dk, dv = torch.autograd.grad(out, (inputs.q, inputs.k, inputs.v), inputs.grad_out)
        grads = (dq, dk, dv)
    if device.is_cuda:
        torch.cuda.synchronize(dev)
    return check_full(case, inputs, out, backend.layout, grads, empty_rows=getattr(backend, "empty_rows", "any"))


def failure_message(case: AttnCase, seed: int, check: FullCheck) -> str:
    text = case_json(case, seed)
    return (
        f"{case.backend} gives a wrong result on {case.describe()} (scale {case.scale:.4g}, seed {seed}):\n"
        f"  {check.describe(case)}\n"
        f"  replay: PYTHONPATH=. python -m pytest_attn.fuzz '{text}'"
    )


class Fuzzer:
    """Runs the fuzz property for one back end and direction (used by the ``attn_fuzzer`` fixture)."""

    def __init__(self, registry: Any, device: DeviceInfo, *, dtypes: tuple[str, ...] | None = None,
                 head_dims: tuple[int, ...] | None = None) -> None:
        self.registry, self.device = registry, device
        self.dtypes, self.head_dims = dtypes, head_dims
        self._spaces: dict[tuple[str, str], Space | str] = {}
        self.examples: dict[tuple[str, str], int] = {}  # examples run (not rejected) per target

    def space(self, name: str, direction: str) -> Space | str:
        key = (name, direction)
        if key not in self._spaces:
            self._spaces[key] = probe_space(self.registry.get(name), self.device, direction, dtypes=self.dtypes,
                                            head_dims=self.head_dims)
        return self._spaces[key]

    def check(self, name: str, direction: str, data: Any) -> None:
        """One example: draw a case, run it, raise AssertionError with the report when it is wrong.
        Cases the back end refuses, or that the known-failure ledger covers, are rejected."""
        import pytest
        from hypothesis import note, reject
        from hypothesis import strategies as st

        from .ledger import known_failure
        from .strategies import attn_cases

        space = self.space(name, direction)
        if isinstance(space, str):
            pytest.skip(space)
        backend = self.registry.get(name)
        case = data.draw(attn_cases(backend=name, space=space, direction=direction), label="case")
        seed = data.draw(st.integers(0, 2**16 - 1), label="seed")
        note(f"replay: PYTHONPATH=. python -m pytest_attn.fuzz '{case_json(case, seed)}'")
        if known_failure(case) is not None or backend.supports(case, self.device) is not None:
            reject()
        try:
            check = run_example(case, backend, self.device, seed)
        except Unsupported:
            reject()
        self.examples[(name, direction)] = self.examples.get((name, direction), 0) + 1
        if not check.ok:
            raise AssertionError(failure_message(case, seed, check))


def main(argv: list[str] | None = None) -> int:
    """Replay one or more examples (case JSONs as a failure prints them); exit 1 if any fails."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m pytest_attn.fuzz '<case json printed by a fuzz failure>' [...]", file=sys.stderr)
        return 2
    from .backends import builtin_registry
    from .device import probe_device

    device = probe_device()
    registry = builtin_registry()
    status = 0
    for text in args:
        case, seed = case_from_json(text)
        try:
            check = run_example(case, registry.get(case.backend), device, seed)
        except Unsupported as exc:
            print(f"{case.backend} refuses {case.describe()} here: {exc}")
            status = max(status, 2)
            continue
        if check.ok:
            print(f"passes: {case.backend} on {case.describe()}: {check.describe(case)}")
        else:
            print(failure_message(case, seed, check))
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
