"""flash-attn: FA2 (``flash_attn``), FA3 (``flash_attn_interface``, Hopper) and FA4 (``flash_attn.cute``).

One back end per entry point, so each result says which call it timed:

* ``flash-attn`` -- ``flash_attn_func`` on a dense ``(b, s, h, d)`` batch, forward and backward;
* ``flash-attn-varlen`` -- ``flash_attn_varlen_func`` on packed tokens + ``cu_seqlens``;
* ``flash-attn-kvcache`` / ``-kvcache-split1`` -- ``flash_attn_with_kvcache`` on a dense cache, with
  the library's split-KV heuristic (``num_splits=0``) or without splitting (``num_splits=1``);
* ``flash-attn-paged`` -- the same on a paged cache (``block_table``, pages of 256 keys, shuffled
  page order as a serving engine leaves them);
* ``fa3``, ``fa3-varlen``, ``fa4``, ``fa4-varlen`` when those builds are importable.

Masks are flags: none, bottom-right causal, sliding window. A custom mask has no flash-attn form.
Arguments are passed by keyword after checking the installed signature (FA3 dropped ``dropout_p``,
so positions differ between builds). A build that lacks a head dim (the wheel in
``shared/gpu-wheels`` has dims <= 64 and 128 only) refuses at the first call: that refusal, in the
library's words, is the skip reason.
"""

from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..masks import flag_form
from .base import ForwardFn, Unsupported, call_or_unsupported

if TYPE_CHECKING:
    from ..case import AttnCase
    from ..device import DeviceInfo
    from ..inputs import Inputs

PAGE = 256  # flash-attn's paged KV cache needs page_block_size to be a multiple of 256


@dataclass(frozen=True)
class Generation:
    key: str
    module: str
    label: str
    install: str
    archs: tuple[tuple[int, int], ...]  # exact compute capabilities, or () for "sm80 and newer"
    dtypes: tuple[str, ...]


FA2 = Generation("fa2", "flash_attn", "flash-attn", "pip install flash-attn --no-build-isolation", (),
                 ("fp16", "bf16"))
FA3 = Generation("fa3", "flash_attn_interface", "flash-attn 3 (flash_attn_interface)",
                 "build it from flash-attention/hopper: cd hopper && python setup.py install", ((9, 0),),
                 ("fp16", "bf16", "fp8"))
FA4 = Generation("fa4", "flash_attn.cute", "flash-attn 4 (flash_attn.cute)", "pip install flash-attn-4",
                 ((9, 0), (10, 0), (10, 3)), ("fp16", "bf16"))

_FUNCS = {"func": "flash_attn_func", "varlen": "flash_attn_varlen_func", "kvcache": "flash_attn_with_kvcache",
          "kvcache-split1": "flash_attn_with_kvcache", "paged": "flash_attn_with_kvcache"}


def keyword_args(fn: Any, wanted: dict[str, Any], defaults: dict[str, Any]) -> dict[str, Any]:
    """``wanted`` restricted to ``fn``'s parameters. A parameter the installed build lacks is dropped
    when its wanted value is the default in ``defaults``; otherwise the case cannot run here."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a C extension without a signature: pass everything
        return dict(wanted)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(wanted)
    out: dict[str, Any] = {}
    for name, value in wanted.items():
        if name in params:
            out[name] = value
        elif name not in defaults or defaults[name] != value:
            raise Unsupported(f"{getattr(fn, '__qualname__', fn)} of this build takes no {name}= argument")
    return out


@dataclass(frozen=True)
class FlashAttnBackend:
    api: str  # key of _FUNCS
    gen: Generation = FA2

    needs_cuda = True
    default_enabled = True
    empty_rows = "zero"  # documented: a query that sees no key gets a zero output row

    @property
    def name(self) -> str:
        base = "flash-attn" if self.gen is FA2 else self.gen.key
        return base if self.api == "func" else f"{base}-{self.api}"

    @property
    def description(self) -> str:
        extra = {"kvcache": " (dense cache, split-KV heuristic)", "kvcache-split1": " (num_splits=1)",
                 "paged": f" (paged cache, {PAGE}-key pages)"}.get(self.api, "")
        return f"{self.gen.module}.{_FUNCS[self.api]}{extra}"

    @property
    def layout(self) -> str:
        return "thd" if self.api == "varlen" else "bshd"

    @property
    def has_backward(self) -> bool:
        return self.api in ("func", "varlen")

    @property
    def only_suites(self) -> tuple[str, ...]:
        return ("decode",) if self.api.startswith(("kvcache", "paged")) else ()

    def _module(self) -> Any:
        import importlib

        return importlib.import_module(self.gen.module)

    def available(self) -> str | None:
        try:
            module = self._module()
        except Exception as exc:  # ImportError, or a build that fails to load its extension
            kind = "is not installed" if isinstance(exc, ModuleNotFoundError) else f"does not import ({exc})"
            return f"{self.gen.label} {kind} ({self.gen.install})"
        if not hasattr(module, _FUNCS[self.api]):
            return f"this {self.gen.label} has no {_FUNCS[self.api]}"
        return None

    def supports(self, case: AttnCase, device: DeviceInfo) -> str | None:
        label = self.gen.label
        if case.dtype not in self.gen.dtypes:
            return f"{label} takes {'/'.join(self.gen.dtypes)}, not {case.dtype}"
        if case.dtype == "fp8" and case.direction == "fwd+bwd":
            return f"{label} has no fp8 backward"
        cc = device.compute_capability
        if cc is not None:
            if self.gen.archs and cc not in self.gen.archs:
                wanted = ", ".join(f"sm{a}{b}" for a, b in self.gen.archs)
                return f"{label} runs on {wanted} only; this GPU is sm{cc[0]}{cc[1]}"
            if not self.gen.archs and cc < (8, 0):
                return f"{label} needs sm80 or newer; this GPU is sm{cc[0]}{cc[1]}"
        if case.head_dim_qk != case.head_dim_v:
            return f"{label} needs the same head dim for q/k and v (got {case.head_dim_qk}/{case.head_dim_v})"
        if case.head_dim_qk > 256:
            return f"{label} takes head dims up to 256 (got {case.head_dim_qk})"
        if flag_form(case) is None:
            return (f"{label} takes causal and sliding-window flags only; the custom mask {case.mask.id!r}"
                    " has no flash-attn form (FlashInfer and flex take custom masks)")
        if case.ragged and self.api != "varlen":
            sibling = FlashAttnBackend("varlen", self.gen).name
            return f"{_FUNCS[self.api]} takes a dense batch; this case is ragged (use {sibling})"
        if self.api != "func" and self.api != "varlen" and case.max_seqlen_q > case.max_seqlen_k:
            return "flash_attn_with_kvcache needs seqlen_q <= the cache length"
        return None

    def workspace_bytes(self, case: AttnCase) -> int:
        if self.api == "paged":  # the paged copy of k and v (padded to whole pages)
            pages = sum(-(-n // PAGE) for n in case.seqlens_k)
            return 2 * pages * PAGE * case.heads_kv * case.head_dim_qk * case.elem_bytes
        return 0

    def expression(self, case: AttnCase) -> str:
        flags = flag_form(case)
        if flags == (-1, -1):
            return "no mask"
        if flags == (-1, 0):
            return "causal=True"
        return f"window_size={flags}"

    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn:
        import torch

        fn = getattr(self._module(), _FUNCS[self.api])
        flags = flag_form(case)
        if flags is None:
            raise Unsupported(f"{self.gen.label} has no form for the custom mask {case.mask.id!r}")
        wanted: dict[str, Any] = {"softmax_scale": case.scale}
        if flags == (-1, 0):
            wanted["causal"] = True
        elif flags != (-1, -1):
            wanted["window_size"] = flags
        defaults = {"causal": False, "window_size": (-1, -1)}
        q, k, v = inputs.q, inputs.k, inputs.v
        args: tuple[Any, ...] = (q, k, v)
        if self.api == "varlen":
            assert inputs.cu_seqlens_q is not None and inputs.cu_seqlens_k is not None
            wanted.update(cu_seqlens_q=inputs.cu_seqlens_q, cu_seqlens_k=inputs.cu_seqlens_k,
                          max_seqlen_q=case.max_seqlen_q, max_seqlen_k=case.max_seqlen_k)
        elif self.api != "func":
            cache_seqlens = torch.tensor(case.seqlens_k, dtype=torch.int32, device=q.device)
            wanted.update(cache_seqlens=cache_seqlens, num_splits=1 if self.api == "kvcache-split1" else 0)
            if self.api == "paged":
                k_pages, v_pages, table = paged_cache(k, v, PAGE, seed=0)
                args = (q, k_pages, v_pages)
                wanted["block_table"] = table
        kwargs = keyword_args(fn, wanted, defaults)

        def forward() -> Any:
            out = fn(*args, **kwargs)
            return out[0] if isinstance(out, tuple) else out

        call_or_unsupported(self.name, forward)
        return forward


def paged_cache(k: Any, v: Any, page: int, seed: int = 0) -> tuple[Any, Any, Any]:
    """A dense ``(b, s, h, d)`` cache copied into ``page``-key pages in a shuffled order (as a serving
    engine's allocator leaves them), with the ``(b, pages_per_seq)`` int32 block table: FlashInfer's
    paged layout (:func:`~pytest_attn.backends.flashinfer.paged_kv`), its page list read as a table."""
    from .flashinfer import paged_kv

    b, s = k.shape[:2]
    k_pages, v_pages, _, indices, _ = paged_kv(k.reshape(b * s, *k.shape[2:]), v.reshape(b * s, *v.shape[2:]),
                                               (s,) * b, page, seed)
    return k_pages, v_pages, indices.view(b, -1)


FLASH_ATTN_BACKENDS = (
    *(FlashAttnBackend(api) for api in ("func", "varlen", "kvcache", "kvcache-split1", "paged")),
    FlashAttnBackend("func", FA3), FlashAttnBackend("varlen", FA3),
    FlashAttnBackend("func", FA4), FlashAttnBackend("varlen", FA4),
)
