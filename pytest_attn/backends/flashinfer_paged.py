"""FlashInfer's paged calls: a KV cache in pages of 16 or 256 keys, in a shuffled page order as a
serving engine's allocator leaves it (:mod:`.kvcache` builds it, once, outside the timed call).

* :class:`FlashInferPaged` (``flashinfer-paged``) -- ``BatchPrefillWithPagedKVCacheWrapper``: several
  queries per sequence (speculative decoding, chunked prefill);
* :class:`FlashInferDecode` (``flashinfer-decode-p16`` / ``-p256`` / ``-tc-p16``) --
  ``BatchDecodeWithPagedKVCacheWrapper``, one query per sequence (``-tc``: ``use_tensor_cores=True``,
  which takes any GQA group size);
* :class:`FlashInferSink` (``flashinfer-sink``) -- ``BatchAttentionWithAttentionSinkWrapper``: the paged prefill
  kernel JIT-built with FlashInfer's ``AttentionSink`` variant, ``run(q, pages, sink, sm_scale)``; sink cases
  only, prefill (the prompt in pages) and decode.

The first two take an fp8 KV cache (``plan(kv_data_type=torch.float8_e4m3fn)``, ``run(..., k_scale=, v_scale=)``),
as FlashInfer 0.7.2 documents them. Not sinks: ``run(sinks=)`` is documented, but 0.7.2's JIT kernels (what Hopper
runs) ignore it -- on an H200 their output matched attention without the sink (within 0.002) and missed the one
with it by 0.07-0.48, and the fuzzer shrank it to one query over two keys, 0.667 off (docs/gpu-validation.md).
Timed, a sink case would read as GPT-OSS's step while computing another; ``flashinfer-sink`` is FlashInfer's call
that computes one.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.case import AttnCase
from ..core.layouts import Inputs, torch_dtype
from .base import ForwardFn, library_refusal
from .flashinfer import FlashInferCall, fi_kwargs, window_flags, workspace
from .kvcache import CachedCall, PagedCache, cache_bytes, cache_of, paged_cache, per_request


@dataclass(frozen=True)
class _FlashInferPagedBase(FlashInferCall):
    page_size: int = 16

    only_suites: ClassVar[tuple[str, ...]] = ("decode",)
    forms: ClassVar[tuple[str, ...]] = ("fp8-kv",)

    def _refuses(self, case: AttnCase) -> str | None:
        if case.sinks and "sinks" not in self.forms:
            return (f"{self.api}.run(sinks=) is ignored by FlashInfer 0.7.2's JIT kernels on Hopper (measured on an"
                    " H200: its output is attention without the sink), so a sink case cannot be timed through it;"
                    " flashinfer-sink and fa4 take sinks")
        if case.cache is not None and case.cache.slots:
            return f"{self.name} maps requests to pages by its index arrays; shuffled cache rows are a dense-cache idea"
        return self._flags_or_refuse(case)

    def workspace_bytes(self, case: AttnCase) -> int:
        return super().workspace_bytes(case) + cache_bytes(case, self.page_size)

    def _paged_plan(self, case: AttnCase, inputs: Inputs) -> tuple[PagedCache, dict[str, Any]]:
        """The paged cache (its index arrays describe every request after the call's append) and the
        keywords every paged plan() takes."""
        cache = paged_cache(case, inputs.k, inputs.v, self.page_size)
        flags = window_flags(case)
        assert flags is not None
        dtype = torch_dtype(case.dtype)
        kv_dtype = torch_dtype(case.kv_dtype) if case.kv_dtype else dtype
        wanted: dict[str, Any] = {"sm_scale": case.scale, "q_data_type": dtype, "kv_data_type": kv_dtype}
        if flags[1] >= 0:
            wanted["window_left"] = flags[1]
        return cache, wanted

    def _run_kwargs(self, run: Any, case: AttnCase, inputs: Inputs) -> dict[str, Any]:
        """What ``run()`` takes beyond q and the pages: the fp8 cache's scales."""
        wanted: dict[str, Any] = {}
        if case.kv_dtype is not None:
            wanted.update(k_scale=inputs.k_scale, v_scale=inputs.v_scale)
        return fi_kwargs(run, wanted)

    def _step(self, fi: Any, case: AttnCase, inputs: Inputs, cache: PagedCache,
              attend: Callable[[], Any]) -> ForwardFn:
        """``attend`` after the append, as a serving step does it: FlashInfer's ``append_paged_kv_cache``
        writes each request's new keys and values at its cache length, then the attention call reads them."""
        import torch

        append = cache_of(case).append
        if not append:
            return CachedCall(attend, cache.view())
        new_k, new_v = (torch.cat([p[-append:] for p in per_request(case, t)]) for t in (inputs.k, inputs.v))
        cached = cache_of(case).cached(case.seqlens_k)
        device = inputs.q.device
        batch_indices = torch.arange(case.batch, dtype=torch.int32, device=device).repeat_interleave(append)
        positions = torch.tensor([c + j for c in cached for j in range(append)], dtype=torch.int32, device=device)
        write = getattr(fi, "append_paged_kv_cache", None) or fi.page.append_paged_kv_cache
        pages = (cache.k, cache.v)

        def step() -> Any:
            write(new_k, new_v, batch_indices, positions, pages, cache.indices, cache.indptr, cache.last_page_len,
                  kv_layout="NHD")
            return attend()

        return CachedCall(step, cache.view())


@dataclass(frozen=True)
class FlashInferPaged(_FlashInferPagedBase):
    """``BatchPrefillWithPagedKVCacheWrapper``: several queries per sequence against a paged cache."""

    api: ClassVar[str] = "BatchPrefillWithPagedKVCacheWrapper"

    @property
    def name(self) -> str:
        return "flashinfer-paged"

    @property
    def description(self) -> str:
        return f"flashinfer.{self.api} (pages of {self.page_size})"

    def _build(self, fi: Any, case: AttnCase, inputs: Inputs) -> ForwardFn:
        cache, wanted = self._paged_plan(case, inputs)
        flags = window_flags(case)
        assert flags is not None and inputs.cu_seqlens_q is not None
        wrapper = fi.BatchPrefillWithPagedKVCacheWrapper(workspace(inputs.q.device), "NHD")
        with library_refusal(self.name, "plan()"):
            wrapper.plan(inputs.cu_seqlens_q, cache.indptr, cache.indices, cache.last_page_len, case.heads_q,
                         case.heads_kv, case.head_dim_qk, self.page_size,
                         **fi_kwargs(wrapper.plan, {**wanted, "causal": flags[0]}))
        q, pages, more = inputs.q, (cache.k, cache.v), self._run_kwargs(wrapper.run, case, inputs)
        return self._step(fi, case, inputs, cache, lambda: wrapper.run(q, pages, **more))


@dataclass(frozen=True)
class FlashInferDecode(_FlashInferPagedBase):
    """``BatchDecodeWithPagedKVCacheWrapper``: one query per sequence (``tensor_cores``: the prefill
    kernels underneath, which take any GQA group size)."""

    tensor_cores: bool = False

    api: ClassVar[str] = "BatchDecodeWithPagedKVCacheWrapper"

    @property
    def name(self) -> str:
        return f"flashinfer-decode{'-tc' if self.tensor_cores else ''}-p{self.page_size}"

    @property
    def description(self) -> str:
        tc = ", use_tensor_cores=True" if self.tensor_cores else ""
        return f"flashinfer.{self.api} (pages of {self.page_size}{tc})"

    def _refuses(self, case: AttnCase) -> str | None:
        if case.max_seqlen_q != 1:
            return (f"{self.api} takes one query per sequence (this case has {case.max_seqlen_q};"
                    " use flashinfer-paged)")
        return super()._refuses(case)

    def _build(self, fi: Any, case: AttnCase, inputs: Inputs) -> ForwardFn:
        cache, wanted = self._paged_plan(case, inputs)
        wrapper = fi.BatchDecodeWithPagedKVCacheWrapper(workspace(inputs.q.device), "NHD",
                                                        use_tensor_cores=self.tensor_cores)
        hint = "" if self.tensor_cores else "its tensor-core decode (flashinfer-decode-tc-p16) takes any group size"
        with library_refusal(self.name, "plan()", hint):
            wrapper.plan(cache.indptr, cache.indices, cache.last_page_len, case.heads_q, case.heads_kv,
                         case.head_dim_qk, self.page_size, **fi_kwargs(wrapper.plan, wanted))
        q, pages, more = inputs.q, (cache.k, cache.v), self._run_kwargs(wrapper.run, case, inputs)
        return self._step(fi, case, inputs, cache, lambda: wrapper.run(q, pages, **more))


@dataclass(frozen=True)
class FlashInferSink(_FlashInferPagedBase):
    """``BatchAttentionWithAttentionSinkWrapper``: a sink logit per query head (fp32, in the softmax's own units)
    passed to ``run()`` with the scale, as FlashInfer's own tests call it (its test_attention_sink.py)."""

    api: ClassVar[str] = "BatchAttentionWithAttentionSinkWrapper"
    only_suites: ClassVar[tuple[str, ...]] = ("prefill", "decode")
    forms: ClassVar[tuple[str, ...]] = ("sinks",)

    @property
    def name(self) -> str:
        return "flashinfer-sink"

    @property
    def description(self) -> str:
        return f"flashinfer.{self.api} (pages of {self.page_size}; run(q, pages, sink, sm_scale))"

    def _refuses(self, case: AttnCase) -> str | None:
        if not case.sinks:
            return f"{self.api} is FlashInfer's call for attention sinks and this case has none (flashinfer-paged)"
        return super()._refuses(case)

    def expression(self, case: AttnCase) -> str:
        return f"{super().expression(case)}, sink logit per head"

    def _build(self, fi: Any, case: AttnCase, inputs: Inputs) -> ForwardFn:
        import torch

        cache, wanted = self._paged_plan(case, inputs)
        flags = window_flags(case)
        assert flags is not None and inputs.cu_seqlens_q is not None and inputs.sinks is not None
        # the window and dims pick the JIT module at construction; plan() takes the window again
        with library_refusal(self.name, "the wrapper's construction"):
            wrapper = fi.BatchAttentionWithAttentionSinkWrapper(
                workspace(inputs.q.device), "NHD", q_data_type=wanted["q_data_type"],
                kv_data_type=wanted["kv_data_type"], head_dim_qk=case.head_dim_qk, head_dim_vo=case.head_dim_v,
                window_left=flags[1])
        with library_refusal(self.name, "plan()"):
            wrapper.plan(inputs.cu_seqlens_q, cache.indptr, cache.indices, cache.last_page_len, case.heads_q,
                         case.heads_kv, case.head_dim_qk, self.page_size,
                         **fi_kwargs(wrapper.plan, {**wanted, "causal": flags[0]}))
        q, pages = inputs.q, (cache.k, cache.v)
        sink = inputs.sinks.to(device=q.device, dtype=torch.float32)
        scale = float(case.scale)
        return self._step(fi, case, inputs, cache, lambda: wrapper.run(q, pages, sink, scale))


PAGED_BACKENDS: tuple[FlashInferCall, ...] = (
    FlashInferPaged(16),
    FlashInferDecode(16),
    FlashInferDecode(256),
    FlashInferDecode(16, tensor_cores=True),
    FlashInferSink(16),
)
