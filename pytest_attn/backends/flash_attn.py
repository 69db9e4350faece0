"""flash-attn: FA2 (``flash_attn``), FA3 (``flash_attn_interface``, Hopper) and FA4 (``flash_attn.cute``).

One back end per entry point, so each result says which call it timed -- one small class each:

* :class:`FlashAttnFunc` (``flash-attn``) -- ``flash_attn_func`` on a dense ``(b, s, h, d)`` batch,
  forward and backward;
* :class:`FlashAttnVarlen` (``flash-attn-varlen``) -- ``flash_attn_varlen_func`` on packed tokens +
  ``cu_seqlens``;
* :class:`FlashAttnKvcache` (``flash-attn-kvcache`` / ``-kvcache-split1`` / ``-paged``) --
  ``flash_attn_with_kvcache`` on a dense cache with the library's split-KV heuristic
  (``num_splits=0``) or without splitting (``num_splits=1``), or on a paged cache (``block_table``,
  pages of 256 keys, shuffled page order as a serving engine leaves them);
* ``fa3``, ``fa3-varlen``, ``fa3-kvcache`` (dense cache; upstream or the forward-only ``fa3-fwd`` wheel:
  :mod:`.fa3`), ``fa4``, ``fa4-varlen`` when those builds are importable;
* :class:`Fa4Paged` (``fa4-paged``) -- FA4's KV-cache path: ``flash_attn.cute.flash_attn_varlen_func``
  over a paged cache (``page_table``, ``seqused_k``), one split (``num_splits=1``: FA4 has no split-KV
  on sm90, and its heuristic raises "SplitKV not supported on SM 9.0" where it would split).
  FA4 has no ``flash_attn_with_kvcache``: it reads a cache and writes no new tokens into it, so a
  serving step that appends is not its case.

Masks are flags: none, bottom-right causal, sliding window. A custom mask has no flash-attn form.
FA2 and FA3 spell an unbounded window side ``-1``; FA4 spells it ``None`` and takes a single ``-1``
literally (``window_size=(0, -1)`` there means "no key to the right, not even the diagonal": every
row sees nothing), so each generation gets its own spelling (:attr:`Generation.unbounded`).
Arguments are passed by keyword after checking the installed signature (FA3 dropped ``dropout_p``).
A build that lacks a head dim refuses at the first call: that refusal, in its words, is the skip reason.
FA4 takes sinks (``learnable_sink``); FA3 and FA4 take DeepSeek's (192, 128) head dims.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.case import AttnCase
from ..core.device import DeviceInfo
from ..core.layouts import Inputs
from ..core.masks import flag_form
from . import fa3
from .base import ForwardFn, QuietWarning, Unsupported, call_or_unsupported
from .kvcache import CachedCall, DenseCache, PagedCache, cache_bytes, cache_of, dense_cache, new_tokens, paged_cache
from .signature import matched_kwargs

PAGE = 256  # flash-attn's paged KV cache needs page_block_size to be a multiple of 256
FLAG_DEFAULTS = {"causal": False, "window_size": (-1, -1)}  # dropped where a build lacks them, if unchanged


@dataclass(frozen=True)
class Generation:
    key: str
    module: str
    label: str
    distribution: str  # what pip installs it as
    install: str
    archs: tuple[tuple[int, int], ...]  # exact compute capabilities, or () for "sm80 and newer"
    dtypes: tuple[str, ...]
    unbounded: int | None = -1  # how window_size spells an unbounded side
    head_dim_multiple: int = 1  # head dims must be a multiple of this (FA4: 16 bytes of the element)
    #: The head dims the fuzzer draws by default: a library that compiles one kernel per head dim (and
    #: dtype, mask kind, GQA ratio ...) is fuzzed on the two that models use, not on nine
    #: (``--attn-fuzz-head-dims`` draws others).
    fuzz_head_dims: tuple[int, ...] | None = None
    #: What the build raises, beyond RuntimeError/ValueError/NotImplementedError, when it refuses a case
    #: at its first call (FA4 checks its arguments with ``assert``)
    refusals: tuple[type[Exception], ...] = ()
    dim_pairs: tuple[tuple[int, int], ...] = ()  # unequal (head_dim_qk, head_dim_v) it takes
    forms: tuple[str, ...] = ()  # of pytest_attn.core.forms.FORMS: FA4 takes sinks (learnable_sink)


FA2 = Generation("fa2", "flash_attn", "flash-attn", "flash-attn", "pip install flash-attn --no-build-isolation", (),
                 ("fp16", "bf16"))
FA3 = Generation("fa3", "flash_attn_interface", "flash-attn 3 (flash_attn_interface)", "flash-attn-3",
                 "pip install fa3-fwd (its forward only), or build it from flash-attention/hopper", ((9, 0),),
                 ("fp16", "bf16", "fp8"), dim_pairs=tuple(fa3.HDIM_PAIRS))
FA4 = Generation("fa4", "flash_attn.cute", "flash-attn 4 (flash_attn.cute)", "flash-attn-4",
                 "pip install flash-attn-4", ((9, 0), (10, 0), (10, 3)), ("fp16", "bf16"), unbounded=None,
                 head_dim_multiple=8, fuzz_head_dims=(64, 128), refusals=(AssertionError,), dim_pairs=((192, 128),),
                 forms=("sinks",))

#: The CuTe DSL warns once per kernel it compiles that FA4's ``AuxData`` argument "cannot be converted to a
#: JitArgument" (dozens per run; FA4 passes it as a compile-time constant on purpose). Not the user's
#: business: the plugin filters this one message in attention runs, nothing else the DSL says.
FA4_COMPILE_NOISE = (r"Argument \S+ \(position \d+\) cannot be converted to a JitArgument for function .*"
                     r"flash_attn\.cute\.utils\.AuxData")
#: What FA4 (4.0.0b36) and quack print on import and compile with nvidia-cutlass-dsl 4.8: the DSL's
#: DeprecationWarnings about APIs *their* code calls (``cutlass.utils.LayoutEnum``, ``Arch``,
#: ``SmemAllocator``, ``warpgroup.OperandMajorMode``: 697 lines in a ci-profile fuzz on an H200), and
#: the AuxData note above. Filtered by the module they are attributed to -- flash_attn.cute and quack --
#: except the one raised in the code the DSL generates (``<string>``), matched by its message; a
#: DeprecationWarning from the user's own code still shows.
FA4_QUIET: tuple[QuietWarning, ...] = (
    QuietWarning(FA4_COMPILE_NOISE, UserWarning),
    QuietWarning("", DeprecationWarning, r"flash_attn\.cute"),
    QuietWarning("", DeprecationWarning, r"quack"),
    QuietWarning(r"warpgroup\.OperandMajorMode is deprecated", DeprecationWarning),
)


def mask_kwargs(case: AttnCase, unbounded: int | None = -1) -> dict[str, Any]:
    """The case's mask as flash-attn's flags (none, ``causal=True`` or ``window_size=...``), an unbounded
    window side spelled ``unbounded`` (FA2/FA3: -1, FA4: None)."""
    flags = flag_form(case)
    if flags is None:
        raise Unsupported(f"flash-attn has no form for the custom mask {case.mask.id!r}")
    if flags == (-1, 0):
        return {"causal": True}
    if flags == (-1, -1):
        return {}
    return {"window_size": tuple(unbounded if side == -1 else side for side in flags)}


def sink_kwargs(inputs: Inputs) -> dict[str, Any]:
    """FA4's ``learnable_sink=``: a logit per query head in bf16, as it asserts (the inputs' are exact in bf16)."""
    return {} if inputs.sinks is None else {"learnable_sink": inputs.sinks.to(inputs.q.device).bfloat16()}


@dataclass(frozen=True)
class _FlashAttn:
    """What every flash-attn entry point shares: availability, what it refuses, the mask as flags."""

    gen: Generation = FA2

    function: ClassVar[str]
    suffix: ClassVar[str]
    layout: ClassVar[str] = "bshd"
    has_backward: ClassVar[bool] = False
    only_suites: ClassVar[tuple[str, ...]] = ()
    needs_cuda: ClassVar[bool] = True
    default_enabled: ClassVar[bool] = True
    empty_rows: ClassVar[str] = "zero"  # documented: a query that sees no key gets a zero output row

    @property
    def name(self) -> str:
        return ("flash-attn" if self.gen is FA2 else self.gen.key) + self.suffix

    @property
    def description(self) -> str:
        return f"{self.gen.module}.{self.function}"

    @property
    def distribution(self) -> str | None:
        return fa3.distribution() if self.gen is FA3 else self.gen.distribution

    @property
    def fuzz_head_dims(self) -> tuple[int, ...] | None:
        return self.gen.fuzz_head_dims

    @property
    def forms(self) -> tuple[str, ...]:
        return self.gen.forms

    def _module(self) -> Any:
        return fa3.import_interface() if self.gen is FA3 else importlib.import_module(self.gen.module)

    def available(self) -> str | None:
        try:
            module = self._module()
        except Exception as exc:  # ImportError, or a build that fails to load its extension
            kind = "is not installed" if isinstance(exc, ModuleNotFoundError) else f"does not import ({exc})"
            return f"{self.gen.label} {kind} ({self.gen.install})"
        if not hasattr(module, self.function):
            return f"this {self.gen.label} has no {self.function}"
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
        pair = (case.head_dim_qk, case.head_dim_v)
        if pair[0] != pair[1] and pair not in self.gen.dim_pairs:
            takes = f" or {', '.join(map(str, self.gen.dim_pairs))}" if self.gen.dim_pairs else ""
            return f"{label} needs the same head dim for q/k and v{takes} (got {pair[0]}/{pair[1]})"
        if case.head_dim_qk > 256:
            return f"{label} takes head dims up to 256 (got {case.head_dim_qk})"
        if case.head_dim_qk % self.gen.head_dim_multiple:
            return f"{label} takes head dims in multiples of {self.gen.head_dim_multiple} (got {case.head_dim_qk})"
        if flag_form(case) is None:
            return (f"{label} takes causal and sliding-window flags only; the custom mask {case.mask.id!r}"
                    " has no flash-attn form (FlashInfer and flex take custom masks)")
        built = fa3.build_refusal(case, isinstance(self, FlashAttnVarlen)) if self.gen is FA3 else None
        return built or self._refuses(case)

    def _refuses(self, case: AttnCase) -> str | None:
        """What this entry point refuses beyond the shared rules."""
        if case.ragged:
            return f"{self.function} takes a dense batch; this case is ragged (use {FlashAttnVarlen(self.gen).name})"
        return None

    def workspace_bytes(self, case: AttnCase) -> int:
        return 0

    def expression(self, case: AttnCase) -> str:
        flags = mask_kwargs(case, self.gen.unbounded)
        if not flags:
            return "no mask"
        return "causal=True" if "causal" in flags else f"window_size={flags['window_size']}"

    def compiled_kernels(self) -> int | None:
        """How many kernels this process's FA4 has compiled (or loaded from its disk cache) so far: the
        sizes of the JIT caches ``flash_attn.cute.interface`` keeps per entry point; None for FA2/FA3,
        which ship compiled, or where a build keeps no such cache."""
        if self.gen is not FA4:
            return None
        import sys

        interface = sys.modules.get("flash_attn.cute.interface")
        if interface is None:
            return 0  # not imported yet: nothing compiled
        caches = [getattr(getattr(fn, "compile_cache", None), "cache", None) for fn in vars(interface).values()
                  if callable(fn)]
        sizes = [len(c) for c in caches if isinstance(c, dict)]
        return sum(sizes) if sizes else None

    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn:
        fn = getattr(self._module(), self.function)
        args, wanted = self._arguments(case, inputs)
        kwargs = matched_kwargs(fn, {"softmax_scale": case.scale, **mask_kwargs(case, self.gen.unbounded), **wanted,
                                     **sink_kwargs(inputs)}, droppable=FLAG_DEFAULTS)

        def forward() -> Any:
            out = fn(*args, **kwargs)
            return out[0] if isinstance(out, tuple) else out  # FA3 and FA4 also return the LSE

        call_or_unsupported(self.name, forward, self.gen.refusals)
        return forward

    def _arguments(self, case: AttnCase, inputs: Inputs) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """Positional tensors and the entry point's own keywords."""
        return (inputs.q, inputs.k, inputs.v), {}


@dataclass(frozen=True)
class FlashAttnFunc(_FlashAttn):
    function: ClassVar[str] = "flash_attn_func"
    suffix: ClassVar[str] = ""
    has_backward: ClassVar[bool] = True


@dataclass(frozen=True)
class FlashAttnVarlen(_FlashAttn):
    function: ClassVar[str] = "flash_attn_varlen_func"
    suffix: ClassVar[str] = "-varlen"
    layout: ClassVar[str] = "thd"
    has_backward: ClassVar[bool] = True

    def _refuses(self, case: AttnCase) -> str | None:
        return None

    def _arguments(self, case: AttnCase, inputs: Inputs) -> tuple[tuple[Any, ...], dict[str, Any]]:
        assert inputs.cu_seqlens_q is not None and inputs.cu_seqlens_k is not None, "thd inputs carry cu_seqlens"
        return (inputs.q, inputs.k, inputs.v), {
            "cu_seqlens_q": inputs.cu_seqlens_q, "cu_seqlens_k": inputs.cu_seqlens_k,
            "max_seqlen_q": case.max_seqlen_q, "max_seqlen_k": case.max_seqlen_k}


@dataclass(frozen=True)
class FlashAttnKvcache(_FlashAttn):
    """``flash_attn_with_kvcache``: ``num_splits`` 0 (the split-KV heuristic) or 1, dense or paged. A
    serving batch: each request's own cache length (``cache_seqlens``), new tokens written into the cache
    by the call (``k=``, ``v=``), requests in shuffled cache rows (``cache_batch_idx``, dense only)."""

    num_splits: int = 0
    paged: bool = False

    function: ClassVar[str] = "flash_attn_with_kvcache"
    layout: ClassVar[str] = "thd"  # packed: the cache is built per request from the case's own keys
    only_suites: ClassVar[tuple[str, ...]] = ("decode",)

    @property
    def suffix(self) -> str:  # type: ignore[override]
        return "-paged" if self.paged else "-kvcache" + ("-split1" if self.num_splits == 1 else "")

    @property
    def description(self) -> str:
        how = f"paged cache, {PAGE}-key pages" if self.paged else (
            "dense cache, num_splits=1" if self.num_splits == 1 else "dense cache, split-KV heuristic")
        return f"{self.gen.module}.{self.function} ({how})"

    def _refuses(self, case: AttnCase) -> str | None:
        if len(set(case.seqlens_q)) > 1:
            varlen = FlashAttnVarlen(self.gen).name
            return f"{self.function} takes the same number of queries per request (use {varlen})"
        if any(q > k for q, k in zip(case.seqlens_q, case.seqlens_k, strict=True)):
            return f"{self.function} needs seqlen_q <= each request's cache length"
        if self.paged and case.cache is not None and case.cache.slots:
            return f"{self.name} maps requests to pages by its block table; cache_batch_idx is for dense caches"
        return None

    def workspace_bytes(self, case: AttnCase) -> int:
        return cache_bytes(case, PAGE if self.paged else None)

    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn:
        import torch

        fn = getattr(self._module(), self.function)
        b, sq = case.batch, case.seqlens_q[0]
        q = inputs.q.reshape(b, sq, *inputs.q.shape[1:])
        cache: DenseCache | PagedCache
        if self.paged:
            cache = paged_cache(case, inputs.k, inputs.v, PAGE)
            cached = torch.tensor(cache_of(case).cached(case.seqlens_k), dtype=torch.int32, device=q.device)
            wanted: dict[str, Any] = {"block_table": cache.table}
        else:
            cache = dense_cache(case, inputs.k, inputs.v)
            cached = cache.cached
            wanted = {"cache_batch_idx": cache.batch_idx} if cache.batch_idx is not None else {}
        new = new_tokens(case, inputs)
        if new is not None:
            wanted.update(k=new[0], v=new[1])
        wanted.update(cache_seqlens=cached, num_splits=self.num_splits)
        kwargs = matched_kwargs(fn, {"softmax_scale": case.scale, **mask_kwargs(case, self.gen.unbounded), **wanted},
                                droppable=FLAG_DEFAULTS)
        return _cache_call(self, fn, q, kwargs, cache)


def _cache_call(backend: _FlashAttn, fn: Any, q: Any, kwargs: dict[str, Any],
                cache: DenseCache | PagedCache) -> ForwardFn:
    """The timed call on a KV cache (dense or paged): ``fn(q, k_cache, v_cache, **kwargs)`` with ``q`` as
    (batch, seqlen_q, heads, dim), its output back in the packed layout, the cache it reads kept for the
    check; tried once here, so a case the build refuses is a skip."""
    b, sq = q.shape[0], q.shape[1]
    k_cache, v_cache = cache.k, cache.v

    def forward() -> Any:
        out = fn(q, k_cache, v_cache, **kwargs)
        out = out[0] if isinstance(out, tuple) else out
        return out.reshape(b * sq, *out.shape[2:])  # back to the packed layout

    call = CachedCall(forward, cache.view())
    call_or_unsupported(backend.name, call, backend.gen.refusals)
    return call


@dataclass(frozen=True)
class Fa4Paged(_FlashAttn):
    """FA4's KV-cache path: ``flash_attn_varlen_func(q, k_pages, v_pages, page_table=..., seqused_k=...)`` on
    a paged cache in shuffled page order (each request's own length through ``seqused_k``), without
    splitting the keys (``num_splits=1``): on an H200, FA4 4.0.0b36's heuristic (``num_splits=0``) raised
    "SplitKV not supported on SM 9.0" on the Qwen spec-decode case, where it chose to split. It reads the
    cache and writes nothing into it: cases that append new tokens are refused."""

    gen: Generation = FA4
    page: int = 128  # FA4 on sm90 loads whole pages by TMA when a page is one key tile (128 keys)

    function: ClassVar[str] = "flash_attn_varlen_func"
    suffix: ClassVar[str] = "-paged"
    layout: ClassVar[str] = "thd"
    only_suites: ClassVar[tuple[str, ...]] = ("decode",)

    @property
    def description(self) -> str:
        return f"{self.gen.module}.{self.function} (paged cache, {self.page}-key pages, page_table + seqused_k," \
               " num_splits=1)"

    def _refuses(self, case: AttnCase) -> str | None:
        if len(set(case.seqlens_q)) > 1:
            return f"{self.name} takes the same number of queries per request (use {FlashAttnVarlen(self.gen).name})"
        if any(q > k for q, k in zip(case.seqlens_q, case.seqlens_k, strict=True)):
            return f"{self.name} needs seqlen_q <= each request's cache length"
        cache = case.cache
        if cache is not None and cache.append:
            return (f"{self.name} reads a paged cache but writes no new tokens into it (FA4 has no"
                    " flash_attn_with_kvcache); a serving step that appends runs on flash-attn-kvcache or FlashInfer")
        if cache is not None and cache.slots:
            return f"{self.name} maps requests to pages by its page table; shuffled cache rows are for dense caches"
        return None

    def workspace_bytes(self, case: AttnCase) -> int:
        return cache_bytes(case, self.page)

    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn:
        import torch

        fn = getattr(self._module(), self.function)
        b, sq = case.batch, case.seqlens_q[0]
        q = inputs.q.reshape(b, sq, *inputs.q.shape[1:])
        cache = paged_cache(case, inputs.k, inputs.v, self.page)
        used = torch.tensor(case.seqlens_k, dtype=torch.int32, device=q.device)
        kwargs = matched_kwargs(fn, {"softmax_scale": case.scale, **mask_kwargs(case, self.gen.unbounded),
                                     "page_table": cache.table, "seqused_k": used, "num_splits": 1,
                                     **sink_kwargs(inputs)},
                                droppable=FLAG_DEFAULTS)
        return _cache_call(self, fn, q, kwargs, cache)


FLASH_ATTN_BACKENDS: tuple[_FlashAttn, ...] = (
    FlashAttnFunc(), FlashAttnVarlen(), FlashAttnKvcache(), FlashAttnKvcache(num_splits=1),
    FlashAttnKvcache(paged=True), FlashAttnFunc(FA3), FlashAttnVarlen(FA3), FlashAttnKvcache(FA3),
    FlashAttnFunc(FA4), FlashAttnVarlen(FA4), Fa4Paged(),
)
