"""FlashInfer: single-request prefill, ragged and paged batch prefill, paged decode, block-sparse.

One back end per call users make, so each result names what it timed -- one small class each:

* :class:`FlashInferSingle` -- ``single_prefill_with_kv_cache``:

  - ``flashinfer-single``: the mask as flags (none, causal, ``window_left``): the fast path;
  - ``flashinfer-custom``: the mask as a dense bool ``custom_mask``, packed to bits *inside every
    call*, as user code that passes ``custom_mask`` does; sm90 then runs the FA2-style kernel that
    reads the mask per tile (mask suite only);
  - ``flashinfer-packed``: ``packed_custom_mask`` packed once beforehand (little bit order): the
    kernel's own cost of a custom mask (mask suite only);
* :class:`FlashInferBsr` (``flashinfer-bsr``) -- ``BlockSparseAttentionWrapper``: the mask as
  ``R x C`` tiles; only partly visible tiles carry a per-pair mask (mask suite only);
* :class:`FlashInferRagged` (``flashinfer-ragged``) -- ``BatchPrefillWithRaggedKVCacheWrapper`` on
  packed tokens (flags, or a custom mask per sequence);
* the paged calls -- ``flashinfer-paged`` and ``flashinfer-decode-*`` -- are in :mod:`.flashinfer_paged`.

``plan()`` runs in ``prepare``, outside the timed region; the first call, which JIT-compiles the
kernel (30-100 s on first use), runs there too, never in a sample. Keyword names that changed
between versions are matched against the installed signature (:func:`fi_kwargs`).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from ..core.case import AttnCase
from ..core.device import DeviceInfo
from ..core.layouts import Inputs, torch_dtype
from ..core.mask_formats import bsr_block_width, to_bsr
from ..core.mask_tensors import dense_mask, pack_bits_torch
from ..core.masks import dense_mask_np, effective_mask, flag_form
from . import flashinfer_jit
from .base import ForwardFn, JitModule, Unsupported, call_or_unsupported, library_refusal
from .signature import matched_kwargs

INSTALL = "pip install flashinfer-python"
WORKSPACE_BYTES = 128 * 2**20
HEAD_DIMS = (64, 128, 256)
BSR_TILE, BSR_SMALLEST_TILE = 128, 64

#: Keyword renames across FlashInfer versions: new name -> older names.
RENAMES: dict[str, tuple[str, ...]] = {
    "use_fp16_qk_reduction": ("allow_fp16_qk_reduction",),
    "q_data_type": ("data_type",),
}
#: Keywords older versions lack and that may be left out whatever their value.
OPTIONAL = {"use_fp16_qk_reduction": ..., "kv_data_type": ..., "o_data_type": ...}


def fi_kwargs(fn: Any, wanted: dict[str, Any]) -> dict[str, Any]:
    """``wanted`` keyword arguments under the names the installed ``fn`` takes (see :data:`RENAMES`)."""
    return matched_kwargs(fn, wanted, renames=RENAMES, droppable=OPTIONAL,
                          upgrade=f"a newer flashinfer-python has it ({INSTALL} --upgrade)")


def window_flags(case: AttnCase) -> tuple[bool, int] | None:
    """(causal, window_left) for the case's mask, or None when FlashInfer's flags cannot say it."""
    flags = flag_form(case)
    if flags is None:
        return None
    left, right = flags
    if right == -1 and left == -1:
        return (False, -1)
    if right == 0:
        return (True, left)
    return None


def workspace(dev: Any) -> Any:
    import torch

    return torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)


def _mask_bytes(case: AttnCase) -> int:
    pairs = sum(sq * sk for sq, sk in zip(case.seqlens_q, case.seqlens_k, strict=True))
    return pairs + pairs // 8 + 1  # the dense bool mask, and its packed bits


@dataclass(frozen=True)
class FlashInferCall:
    """What every FlashInfer call shares: availability, dtypes, head dims, alignment; ``plan()`` and
    the first (compiling) call in ``prepare``."""

    api: ClassVar[str]  # the flashinfer attribute the call uses
    layout: ClassVar[str] = "thd"
    needs_cuda: ClassVar[bool] = True
    has_backward: ClassVar[bool] = False
    default_enabled: ClassVar[bool] = True
    distribution: ClassVar[str | None] = "flashinfer-python"
    only_suites: ClassVar[tuple[str, ...]] = ()
    empty_rows: ClassVar[str] = "any"  # it refuses seqlen_q > seqlen_k, the only way a row sees no key
    #: unequal (head_dim_qk, head_dim_vo) it takes: DeepSeek's prefill, where the call says head_dim_vo
    dim_pairs: ClassVar[tuple[tuple[int, int], ...]] = ()

    def available(self) -> str | None:
        try:
            import flashinfer
        except ModuleNotFoundError:
            return f"FlashInfer is not installed ({INSTALL})"
        except Exception as exc:
            return f"FlashInfer does not import ({type(exc).__name__}: {exc})"
        if not hasattr(flashinfer, self.api):
            return f"FlashInfer {getattr(flashinfer, '__version__', '?')} has no {self.api} ({INSTALL} --upgrade)"
        return None

    def supports(self, case: AttnCase, device: DeviceInfo) -> str | None:
        if case.dtype not in ("fp16", "bf16"):
            return f"pytest-attn's FlashInfer adapter runs fp16/bf16, not {case.dtype}"
        cc = device.compute_capability
        if cc is not None and cc < (8, 0):
            return f"FlashInfer's bf16/fp16 prefill kernels need sm80 or newer here; this GPU is sm{cc[0]}{cc[1]}"
        pair = (case.head_dim_qk, case.head_dim_v)
        if pair not in self.dim_pairs and (pair[0] not in HEAD_DIMS or pair[1] != pair[0]):
            also = f", and {', '.join(map(str, self.dim_pairs))} here" if self.dim_pairs else ""
            return (f"FlashInfer's kernels are built for head dims {', '.join(map(str, HEAD_DIMS))}{also}"
                    f" (got {case.head_dim_qk}/{case.head_dim_v})")
        if any(sq > sk for sq, sk in zip(case.seqlens_q, case.seqlens_k, strict=True)):
            return "FlashInfer needs seqlen_q <= seqlen_k (bottom-right alignment leaves rows without keys)"
        return self._refuses(case)

    def _refuses(self, case: AttnCase) -> str | None:
        return None

    def _flags_or_refuse(self, case: AttnCase) -> str | None:
        if window_flags(case) is not None:
            return None
        what = "a custom mask" if case.mask.kind == "custom" else f"the window {case.mask.id}"
        return f"{self.api} takes causal/window_left flags; {what} needs flashinfer-custom, -packed, -bsr or -ragged"

    def workspace_bytes(self, case: AttnCase) -> int:
        return WORKSPACE_BYTES + 8 * 2**20

    def expression(self, case: AttnCase) -> str:
        flags = window_flags(case)
        if flags is None:
            return "custom_mask per sequence (packed at plan)"  # a data form: see verdicts.peers.DATA_FORMS
        causal, left = flags
        return ("causal=True" if causal else "no mask") + (f", window_left={left}" if left >= 0 else "")

    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn:
        import flashinfer
        import torch

        forward = self._build(flashinfer, case, inputs)
        call_or_unsupported(self.name, forward)  # JIT-compiles on first use: outside every sample
        torch.cuda.synchronize(inputs.q.device)
        return forward

    def missing_modules(self, case: AttnCase, inputs: Inputs) -> list[JitModule]:
        """The first kernel module this case needs that FlashInfer has not built yet (see
        :mod:`.flashinfer_jit`)."""
        return flashinfer_jit.missing_modules(self.prepare, case, inputs)

    def build_modules(self, modules: list[JitModule]) -> None:
        flashinfer_jit.build_modules(modules)

    def module_built(self, module: JitModule) -> bool:
        return flashinfer_jit.module_built(module)

    def built_modules(self) -> set[str]:
        return flashinfer_jit.built_modules()

    @property
    def name(self) -> str:
        raise NotImplementedError

    def _build(self, fi: Any, case: AttnCase, inputs: Inputs) -> ForwardFn:
        raise NotImplementedError


SINGLE_FORMS = ("flags", "custom", "packed")


@dataclass(frozen=True)
class FlashInferSingle(FlashInferCall):
    """``single_prefill_with_kv_cache`` with the mask as flags, a dense ``custom_mask`` or packed bits."""

    mask_form: str = "flags"

    api: ClassVar[str] = "single_prefill_with_kv_cache"

    @property
    def name(self) -> str:
        return "flashinfer-single" if self.mask_form == "flags" else f"flashinfer-{self.mask_form}"

    @property
    def description(self) -> str:
        how = {"flags": "", "custom": " with custom_mask (dense bool)", "packed": " with packed_custom_mask"}
        return f"flashinfer.{self.api}{how[self.mask_form]}"

    @property
    def only_suites(self) -> tuple[str, ...]:  # type: ignore[override]
        return () if self.mask_form == "flags" else ("masks",)

    def _refuses(self, case: AttnCase) -> str | None:
        if case.batch != 1:
            return f"{self.api} takes one sequence; this case has {case.batch} (use flashinfer-ragged)"
        return self._flags_or_refuse(case) if self.mask_form == "flags" else None

    def workspace_bytes(self, case: AttnCase) -> int:
        return super().workspace_bytes(case) + (0 if self.mask_form == "flags" else _mask_bytes(case))

    def expression(self, case: AttnCase) -> str:
        gb = case.max_seqlen_q * case.max_seqlen_k / 1e9
        if self.mask_form == "custom":
            return f"custom_mask (dense bool, {gb:.3g} GB, packed inside each call)"
        if self.mask_form == "packed":
            return f"packed_custom_mask ({gb / 8:.3g} GB, packed once)"
        return super().expression(case)

    def _build(self, fi: Any, case: AttnCase, inputs: Inputs) -> ForwardFn:
        single = fi.single_prefill_with_kv_cache
        q, k, v = inputs.q, inputs.k, inputs.v
        wanted: dict[str, Any] = {"sm_scale": case.scale, "use_fp16_qk_reduction": False}
        if self.mask_form == "flags":
            flags = window_flags(case)
            if flags is None:
                raise Unsupported(f"{self.api} has no flag for this mask")
            wanted.update(causal=flags[0], window_left=flags[1])
        else:
            dense = dense_mask(case.mask, case.max_seqlen_q, case.max_seqlen_k, q.device)
            if self.mask_form == "custom":
                wanted["custom_mask"] = dense
            else:
                wanted["packed_custom_mask"] = pack_bits_torch(dense)
                del dense
        kwargs = fi_kwargs(single, wanted)
        return lambda: single(q, k, v, **kwargs)


@dataclass(frozen=True)
class FlashInferRagged(FlashInferCall):
    """``BatchPrefillWithRaggedKVCacheWrapper`` on packed tokens: flags, or a custom mask per sequence."""

    api: ClassVar[str] = "BatchPrefillWithRaggedKVCacheWrapper"
    dim_pairs: ClassVar[tuple[tuple[int, int], ...]] = ((192, 128),)  # plan(head_dim_vo=)

    @property
    def name(self) -> str:
        return "flashinfer-ragged"

    @property
    def description(self) -> str:
        return f"flashinfer.{self.api}"

    def _refuses(self, case: AttnCase) -> str | None:
        if window_flags(case) is None and case.mask.kind != "custom":
            return f"FlashInfer has no window with a right extent ({case.mask.id})"
        return None

    def workspace_bytes(self, case: AttnCase) -> int:
        custom = window_flags(case) is None
        return super().workspace_bytes(case) + (_mask_bytes(case) if custom else 0)

    def _build(self, fi: Any, case: AttnCase, inputs: Inputs) -> ForwardFn:
        import torch

        dtype = torch_dtype(case.dtype)
        wrapper = fi.BatchPrefillWithRaggedKVCacheWrapper(workspace(inputs.q.device), "NHD")
        wanted: dict[str, Any] = {"sm_scale": case.scale, "q_data_type": dtype, "kv_data_type": dtype}
        if case.head_dim_v != case.head_dim_qk:
            wanted["head_dim_vo"] = case.head_dim_v
        flags = window_flags(case)
        if flags is not None:
            wanted.update(causal=flags[0], window_left=flags[1])
        else:  # one dense mask per sequence, flattened and concatenated; plan() packs it
            parts = [dense_mask(case.mask, sq, sk, inputs.q.device).reshape(-1)
                     for sq, sk in zip(case.seqlens_q, case.seqlens_k, strict=True)]
            wanted["custom_mask"] = torch.cat(parts)
        assert inputs.cu_seqlens_q is not None and inputs.cu_seqlens_k is not None
        with library_refusal(self.name, "plan()"):
            wrapper.plan(inputs.cu_seqlens_q, inputs.cu_seqlens_k, case.heads_q, case.heads_kv, case.head_dim_qk,
                         **fi_kwargs(wrapper.plan, wanted))
        q, k, v = inputs.q, inputs.k, inputs.v
        return lambda: wrapper.run(q, k, v)


@dataclass(frozen=True)
class FlashInferBsr(FlashInferCall):
    """``BlockSparseAttentionWrapper``: the mask as tiles; partial tiles carry a per-pair mask."""

    api: ClassVar[str] = "BlockSparseAttentionWrapper"
    only_suites: ClassVar[tuple[str, ...]] = ("masks",)

    @property
    def name(self) -> str:
        return "flashinfer-bsr"

    @property
    def description(self) -> str:
        return f"flashinfer.{self.api}"

    def _refuses(self, case: AttnCase) -> str | None:
        if case.batch != 1:
            return f"{self.api} takes one sequence; this case has {case.batch} (use flashinfer-ragged)"
        if bsr_block_width(case.max_seqlen_k, BSR_TILE, BSR_SMALLEST_TILE) is None:
            return (f"block-sparse tiles must divide seqlen_k={case.max_seqlen_k}, and no width from"
                    f" {BSR_SMALLEST_TILE} to {BSR_TILE} does")
        return None

    def workspace_bytes(self, case: AttnCase) -> int:
        return super().workspace_bytes(case) + _mask_bytes(case)

    def expression(self, case: AttnCase) -> str:
        return "block-sparse tiles (BSR)"

    def _build(self, fi: Any, case: AttnCase, inputs: Inputs) -> ForwardFn:
        import torch

        sq, sk = case.max_seqlen_q, case.max_seqlen_k
        width = bsr_block_width(sk, BSR_TILE, BSR_SMALLEST_TILE)
        if width is None:
            raise Unsupported(f"no block-sparse tile width divides seqlen_k={sk}")
        bsr = to_bsr(dense_mask_np(effective_mask(case), sq, sk), width, width)
        dev, dtype = inputs.q.device, torch_dtype(case.dtype)
        wrapper = fi.BlockSparseAttentionWrapper(workspace(dev))
        wanted: dict[str, Any] = {"sm_scale": case.scale, "q_data_type": dtype, "kv_data_type": dtype,
                                  "o_data_type": dtype}
        if bsr.tile_masks is not None:
            wanted["mask"] = torch.from_numpy(bsr.tile_masks).to(dev)
        with library_refusal(self.name, "plan()"):
            wrapper.plan(torch.from_numpy(bsr.indptr).to(dev), torch.from_numpy(bsr.indices).to(dev), sq, sk,
                         bsr.R, bsr.C, case.heads_q, case.heads_kv, case.head_dim_qk, **fi_kwargs(wrapper.plan, wanted))
        q, k, v = inputs.q, inputs.k, inputs.v
        return lambda: wrapper.run(q, k, v)


#: The calls on a whole sequence (the paged ones are in :mod:`.flashinfer_paged`).
PREFILL_BACKENDS: tuple[FlashInferCall, ...] = (
    FlashInferSingle(),
    FlashInferRagged(),
    FlashInferSingle("custom"),
    FlashInferSingle("packed"),
    FlashInferBsr(),
)
