"""FlashInfer's paged calls: a KV cache in pages of 16 or 256 keys, in a shuffled page order as a
serving engine's allocator leaves it (:mod:`.paged` builds it, once, outside the timed call).

* :class:`FlashInferPaged` (``flashinfer-paged``) -- ``BatchPrefillWithPagedKVCacheWrapper``: several
  queries per sequence (speculative decoding, chunked prefill);
* :class:`FlashInferDecode` (``flashinfer-decode-p16`` / ``-p256`` / ``-tc-p16``) --
  ``BatchDecodeWithPagedKVCacheWrapper``, one query per sequence (``-tc``: ``use_tensor_cores=True``,
  which takes any GQA group size).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.case import AttnCase
from ..core.layouts import Inputs, torch_dtype
from .base import ForwardFn, library_refusal
from .flashinfer import FlashInferCall, fi_kwargs, window_flags, workspace
from .paged import paged_kv, pages_bytes


@dataclass(frozen=True)
class _FlashInferPagedBase(FlashInferCall):
    page_size: int = 16

    only_suites: ClassVar[tuple[str, ...]] = ("decode",)

    def _refuses(self, case: AttnCase) -> str | None:
        return self._flags_or_refuse(case)

    def workspace_bytes(self, case: AttnCase) -> int:
        return super().workspace_bytes(case) + pages_bytes(case.seqlens_k, self.page_size, case.heads_kv,
                                                           case.head_dim_qk, case.elem_bytes)

    def _paged_plan(self, case: AttnCase, inputs: Inputs) -> tuple[tuple[Any, ...], dict[str, Any]]:
        """The paged copy of k and v, its index arrays, and the keywords every paged plan() takes."""
        k_pages, v_pages, indptr, indices, last = paged_kv(inputs.k, inputs.v, case.seqlens_k, self.page_size)
        flags = window_flags(case)
        assert flags is not None
        dtype = torch_dtype(case.dtype)
        wanted: dict[str, Any] = {"sm_scale": case.scale, "q_data_type": dtype, "kv_data_type": dtype}
        if flags[1] >= 0:
            wanted["window_left"] = flags[1]
        return (k_pages, v_pages, indptr, indices, last), wanted


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
        (k_pages, v_pages, indptr, indices, last), wanted = self._paged_plan(case, inputs)
        flags = window_flags(case)
        assert flags is not None and inputs.cu_seqlens_q is not None
        wrapper = fi.BatchPrefillWithPagedKVCacheWrapper(workspace(inputs.q.device), "NHD")
        with library_refusal(self.name, "plan()"):
            wrapper.plan(inputs.cu_seqlens_q, indptr, indices, last, case.heads_q, case.heads_kv, case.head_dim_qk,
                         self.page_size, **fi_kwargs(wrapper.plan, {**wanted, "causal": flags[0]}))
        q, cache = inputs.q, (k_pages, v_pages)
        return lambda: wrapper.run(q, cache)


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
        (k_pages, v_pages, indptr, indices, last), wanted = self._paged_plan(case, inputs)
        wrapper = fi.BatchDecodeWithPagedKVCacheWrapper(workspace(inputs.q.device), "NHD",
                                                        use_tensor_cores=self.tensor_cores)
        hint = "" if self.tensor_cores else "its tensor-core decode (flashinfer-decode-tc-p16) takes any group size"
        with library_refusal(self.name, "plan()", hint):
            wrapper.plan(indptr, indices, last, case.heads_q, case.heads_kv, case.head_dim_qk, self.page_size,
                         **fi_kwargs(wrapper.plan, wanted))
        q, cache = inputs.q, (k_pages, v_pages)
        return lambda: wrapper.run(q, cache)


PAGED_BACKENDS: tuple[FlashInferCall, ...] = (
    FlashInferPaged(16),
    FlashInferDecode(16),
    FlashInferDecode(256),
    FlashInferDecode(16, tensor_cores=True),
)
