"""FlashInfer's absorbed-MLA decode: ``BatchMLAPagedAttentionWrapper`` (``flashinfer-mla``) over a paged latent
cache, as FlashInfer 0.7.2 documents it -- ``plan(metadata=flashinfer.mla.MLAPlanMetadata.csr(qo_indptr, kv_indptr,
kv_indices, kv_len_arr), num_heads, head_dim_ckv, head_dim_kpe, page_size, causal, sm_scale, q_data_type,
kv_data_type)``, then ``run(query=q, kv_cache=pages)`` with both packed: the query's last dimension is the
absorbed q (latent) then its rope part, each cache row the latent then the rope key, which is exactly a latent
case's ``q`` and ``k`` (:mod:`pytest_attn.core.forms`). Pages of 64 keys (FlashMLA's size) in a shuffled order.
It runs latent cases only, reads the cache and writes nothing into it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.case import AttnCase
from ..core.device import DeviceInfo
from ..core.layouts import Inputs, torch_dtype
from .base import ForwardFn, library_refusal
from .flashinfer import INSTALL, FlashInferCall, window_flags, workspace
from .kvcache import CachedCall, cache_bytes, paged_cache

#: The latent and rope widths FlashInfer's MLA kernels are built for (DeepSeek-V2/V3).
LATENT, ROPE = 512, 64


@dataclass(frozen=True)
class FlashInferMla(FlashInferCall):
    page_size: int = 64

    api: ClassVar[str] = "BatchMLAPagedAttentionWrapper"
    only_suites: ClassVar[tuple[str, ...]] = ("decode",)
    forms: ClassVar[tuple[str, ...]] = ("latent-kv",)

    @property
    def name(self) -> str:
        return "flashinfer-mla"

    @property
    def description(self) -> str:
        return f"flashinfer.{self.api} (absorbed MLA, paged latent cache of {self.page_size}-key pages)"

    def available(self) -> str | None:
        why = super().available()
        if why:
            return why
        import flashinfer

        if not hasattr(getattr(flashinfer, "mla", None), "MLAPlanMetadata"):
            return f"this FlashInfer has no flashinfer.mla.MLAPlanMetadata (0.7.2 has it: {INSTALL} --upgrade)"
        return None

    def supports(self, case: AttnCase, device: DeviceInfo) -> str | None:
        if not case.latent_kv:
            return (f"{self.name} runs absorbed MLA only (a latent KV case, AttnCase.mla); this case has separate"
                    " keys and values")
        if (case.heads_kv, case.head_dim_qk, case.head_dim_v) != (1, LATENT + ROPE, LATENT):
            return (f"FlashInfer's MLA kernels take one latent KV head of {LATENT} + {ROPE}"
                    f" (got {case.heads_kv} x {case.head_dim_v} + {case.head_dim_qk - case.head_dim_v})")
        if case.dtype not in ("fp16", "bf16"):
            return f"pytest-attn's FlashInfer adapter runs fp16/bf16, not {case.dtype}"
        if any(sq > sk for sq, sk in zip(case.seqlens_q, case.seqlens_k, strict=True)):
            return "FlashInfer needs seqlen_q <= seqlen_k (bottom-right alignment leaves rows without keys)"
        flags = window_flags(case)
        if flags is None or flags[1] >= 0:
            return f"{self.api} takes no mask but causal (got {case.mask.id})"
        cache = case.cache
        if cache is not None and (cache.append or cache.slots):
            return (f"{self.name} reads a paged latent cache and writes nothing into it; a step that appends, or"
                    " requests in shuffled rows, is not its case")
        return None

    def workspace_bytes(self, case: AttnCase) -> int:
        return super().workspace_bytes(case) + cache_bytes(case, self.page_size)

    def _build(self, fi: Any, case: AttnCase, inputs: Inputs) -> ForwardFn:
        import torch

        cache = paged_cache(case, inputs.k, inputs.v, self.page_size)
        latent = cache.k.squeeze(2)  # (pages, page_size, 512 + 64): the packed latent cache
        flags = window_flags(case)
        assert flags is not None and inputs.cu_seqlens_q is not None
        lengths = torch.tensor(case.seqlens_k, dtype=torch.int32, device=inputs.q.device)
        metadata = fi.mla.MLAPlanMetadata.csr(inputs.cu_seqlens_q, cache.indptr, cache.indices, lengths)
        wrapper = fi.BatchMLAPagedAttentionWrapper(workspace(inputs.q.device))
        dtype = torch_dtype(case.dtype)
        with library_refusal(self.name, "plan()"):
            wrapper.plan(metadata=metadata, num_heads=case.heads_q, head_dim_ckv=case.head_dim_v,
                         head_dim_kpe=case.head_dim_qk - case.head_dim_v, page_size=self.page_size, causal=flags[0],
                         sm_scale=case.scale, q_data_type=dtype, kv_data_type=dtype)
        q = inputs.q
        return CachedCall(lambda: wrapper.run(query=q, kv_cache=latent), cache.view())


MLA_BACKENDS: tuple[FlashInferCall, ...] = (FlashInferMla(),)
