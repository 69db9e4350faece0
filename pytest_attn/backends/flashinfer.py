"""FlashInfer: single-request prefill, ragged and paged batch prefill, paged decode, block-sparse.

One back end per call users make, so each result names what it timed:

* ``flashinfer-single`` -- ``single_prefill_with_kv_cache`` with flags (none, causal,
  ``window_left``): the fast path;
* ``flashinfer-custom`` -- the same call given the mask as a dense bool ``custom_mask``: the call
  packs it to bits *inside every call*, as user code that passes ``custom_mask`` does, and sm90 then
  runs the FA2-style kernel that reads the mask per tile (mask suite only);
* ``flashinfer-packed`` -- the same with ``packed_custom_mask`` packed once beforehand (little bit
  order): the kernel's own cost of a custom mask (mask suite only);
* ``flashinfer-bsr`` -- ``BlockSparseAttentionWrapper``: the mask as ``R x C`` tiles; only partly
  visible tiles carry a per-pair mask (mask suite only);
* ``flashinfer-ragged`` -- ``BatchPrefillWithRaggedKVCacheWrapper`` on packed tokens (flags, or a
  custom mask per sequence);
* ``flashinfer-paged`` -- ``BatchPrefillWithPagedKVCacheWrapper`` (pages of 16; several queries per
  sequence, e.g. speculative decoding);
* ``flashinfer-decode-p16`` / ``-p256`` -- ``BatchDecodeWithPagedKVCacheWrapper``, one query per
  sequence, pages of 16 or 256 keys.

``plan()`` runs in ``prepare``, outside the timed region; the first call, which JIT-compiles the
kernel (30-100 s on first use), runs there too, never in a sample. Keyword names that changed
between versions are matched against the installed signature (:func:`fi_kwargs`).
"""

from __future__ import annotations

import contextlib
import inspect
import itertools
from collections.abc import Iterator
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from ..masks import dense_mask, dense_mask_np, effective_mask, flag_form
from .base import ForwardFn, Unsupported, call_or_unsupported

if TYPE_CHECKING:
    from ..case import AttnCase
    from ..device import DeviceInfo
    from ..inputs import Inputs

INSTALL = "pip install flashinfer-python"
WORKSPACE_BYTES = 128 * 2**20
HEAD_DIMS = (64, 128, 256)
BSR_TILE, BSR_SMALLEST_TILE = 128, 64

#: Keyword renames across FlashInfer versions: new name -> older names.
RENAMES: dict[str, tuple[str, ...]] = {
    "use_fp16_qk_reduction": ("allow_fp16_qk_reduction",),
    "q_data_type": ("data_type",),
}

_APIS = {
    "single": "single_prefill_with_kv_cache",
    "custom": "single_prefill_with_kv_cache",
    "packed": "single_prefill_with_kv_cache",
    "bsr": "BlockSparseAttentionWrapper",
    "ragged": "BatchPrefillWithRaggedKVCacheWrapper",
    "paged": "BatchPrefillWithPagedKVCacheWrapper",
    "decode": "BatchDecodeWithPagedKVCacheWrapper",
}
_MASK_ONLY = ("custom", "packed", "bsr")


def fi_kwargs(fn: Any, wanted: dict[str, Any], *, optional: tuple[str, ...] = ()) -> dict[str, Any]:
    """``wanted`` keyword arguments under the names the installed ``fn`` takes (see
    :data:`RENAMES`). A name it lacks under any spelling is dropped when listed in ``optional``,
    else the case cannot run on this version."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return dict(wanted)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(wanted)
    out: dict[str, Any] = {}
    for name, value in wanted.items():
        spelled = next((n for n in (name, *RENAMES.get(name, ())) if n in params), None)
        if spelled is not None:
            out[spelled] = value
        elif name not in optional:
            raise Unsupported(
                f"this FlashInfer's {getattr(fn, '__qualname__', fn)} takes no {name}= argument; a newer"
                f" flashinfer-python has it ({INSTALL} --upgrade)"
            )
    return out


@contextlib.contextmanager
def refusal(name: str, hint: str | None = None) -> Iterator[None]:
    """Turn a library error raised while planning (an unsupported group size, head dim, ...) into
    :class:`Unsupported` with the library's words, like a refusal at the first call."""
    import torch

    try:
        yield
    except torch.cuda.OutOfMemoryError:
        raise
    except (RuntimeError, ValueError, NotImplementedError) as exc:
        first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
        raise Unsupported(f"{name} refused this case at plan(): {first}" + (f"; {hint}" if hint else "")) from exc


def _window_left(case: AttnCase) -> tuple[bool, int] | None:
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


@dataclass(frozen=True)
class FlashInferBackend:
    api: str  # key of _APIS
    page_size: int = 16
    tensor_cores: bool = False  # decode: use_tensor_cores=True (prefill kernels; any GQA group size)

    layout = "thd"
    needs_cuda = True
    has_backward = False
    default_enabled = True
    empty_rows = "any"  # it refuses seqlen_q > seqlen_k, the only way a row sees no key

    @property
    def name(self) -> str:
        if self.api == "decode":
            return f"flashinfer-decode{'-tc' if self.tensor_cores else ''}-p{self.page_size}"
        return f"flashinfer-{self.api}"

    @property
    def description(self) -> str:
        how = {"custom": " with custom_mask (dense bool)", "packed": " with packed_custom_mask",
               "paged": f" (pages of {self.page_size})",
               "decode": f" (pages of {self.page_size}{', use_tensor_cores=True' if self.tensor_cores else ''})"}
        return f"flashinfer.{_APIS[self.api]}{how.get(self.api, '')}"

    @property
    def only_suites(self) -> tuple[str, ...]:
        if self.api in _MASK_ONLY:
            return ("masks",)
        return ("decode",) if self.api in ("paged", "decode") else ()

    def available(self) -> str | None:
        try:
            import flashinfer
        except ModuleNotFoundError:
            return f"FlashInfer is not installed ({INSTALL})"
        except Exception as exc:
            return f"FlashInfer does not import ({type(exc).__name__}: {exc})"
        if not hasattr(flashinfer, _APIS[self.api]):
            version = getattr(flashinfer, "__version__", "?")
            return f"FlashInfer {version} has no {_APIS[self.api]} ({INSTALL} --upgrade)"
        return None

    def supports(self, case: AttnCase, device: DeviceInfo) -> str | None:
        if case.dtype not in ("fp16", "bf16"):
            return f"pytest-attn's FlashInfer adapter runs fp16/bf16, not {case.dtype}"
        cc = device.compute_capability
        if cc is not None and cc < (8, 0):
            return f"FlashInfer's bf16/fp16 prefill kernels need sm80 or newer here; this GPU is sm{cc[0]}{cc[1]}"
        if case.head_dim_qk not in HEAD_DIMS or case.head_dim_v != case.head_dim_qk:
            return (f"FlashInfer's kernels are built for head dims {', '.join(map(str, HEAD_DIMS))}"
                    f" (got {case.head_dim_qk}/{case.head_dim_v})")
        if self.api in ("single", "custom", "packed", "bsr") and case.batch != 1:
            return f"{_APIS[self.api]} takes one sequence; this case has {case.batch} (use flashinfer-ragged)"
        if any(sq > sk for sq, sk in zip(case.seqlens_q, case.seqlens_k, strict=True)):
            return "FlashInfer needs seqlen_q <= seqlen_k (bottom-right alignment leaves rows without keys)"
        flags = _window_left(case)
        if self.api in ("single", "paged", "decode") and flags is None:
            what = "a custom mask" if case.mask.kind == "custom" else f"the window {case.mask.id}"
            return (f"{_APIS[self.api]} takes causal/window_left flags; {what} needs flashinfer-custom,"
                    " -packed, -bsr or -ragged")
        if self.api == "ragged" and flags is None and case.mask.kind != "custom":
            return f"FlashInfer has no window with a right extent ({case.mask.id})"
        if self.api == "decode" and case.max_seqlen_q != 1:
            return (f"BatchDecodeWithPagedKVCacheWrapper takes one query per sequence (this case has"
                    f" {case.max_seqlen_q}; use flashinfer-paged)")
        if self.api == "bsr":
            from ..mask_formats import bsr_block_width

            if bsr_block_width(case.max_seqlen_k, BSR_TILE, BSR_SMALLEST_TILE) is None:
                return (f"block-sparse tiles must divide seqlen_k={case.max_seqlen_k}, and no width from"
                        f" {BSR_SMALLEST_TILE} to {BSR_TILE} does")
        return None

    def workspace_bytes(self, case: AttnCase) -> int:
        pairs = sum(sq * sk for sq, sk in zip(case.seqlens_q, case.seqlens_k, strict=True))
        extra = 0
        if self.api in ("custom", "packed", "bsr") or (self.api == "ragged" and case.mask.kind == "custom"):
            extra = pairs + pairs // 8 + 1  # the dense bool mask, and its packed bits
        elif self.api in ("paged", "decode"):
            pages = sum(-(-n // self.page_size) for n in case.seqlens_k)
            extra = 2 * pages * self.page_size * case.heads_kv * case.head_dim_qk * case.elem_bytes
        return WORKSPACE_BYTES + 8 * 2**20 + extra

    def expression(self, case: AttnCase) -> str:
        gb = case.max_seqlen_q * case.max_seqlen_k / 1e9
        if self.api == "custom":
            return f"custom_mask (dense bool, {gb:.3g} GB, packed inside each call)"
        if self.api == "packed":
            return f"packed_custom_mask ({gb / 8:.3g} GB, packed once)"
        if self.api == "bsr":
            return "block-sparse tiles (BSR)"
        flags = _window_left(case)
        if flags is None:
            return "custom_mask per sequence (packed at plan)"  # a data form: see relative.DATA_FORMS
        causal, left = flags
        return ("causal=True" if causal else "no mask") + (f", window_left={left}" if left >= 0 else "")

    # ---- prepare -----------------------------------------------------------------------------
    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn:
        import flashinfer
        import torch

        from ..inputs import torch_dtype

        q, k, v = inputs.q, inputs.k, inputs.v
        dev, dtype = q.device, torch_dtype(case.dtype)
        forward: ForwardFn
        if self.api in ("single", "custom", "packed"):
            single = flashinfer.single_prefill_with_kv_cache
            wanted: dict[str, Any] = {"sm_scale": case.scale, "use_fp16_qk_reduction": False}
            if self.api == "single":
                flags = _window_left(case)
                if flags is None:
                    raise Unsupported("single_prefill_with_kv_cache has no flag for this mask")
                wanted.update(causal=flags[0], window_left=flags[1])
            elif self.api == "custom":
                wanted["custom_mask"] = dense_mask(case.mask, case.max_seqlen_q, case.max_seqlen_k, dev)
            else:
                from ..mask_formats import pack_bits_torch

                dense = dense_mask(case.mask, case.max_seqlen_q, case.max_seqlen_k, dev)
                wanted["packed_custom_mask"] = pack_bits_torch(dense)
                del dense
            kwargs = fi_kwargs(single, wanted, optional=("use_fp16_qk_reduction",))

            def forward() -> Any:
                return single(q, k, v, **kwargs)

        elif self.api == "ragged":
            forward = self._ragged(flashinfer, case, inputs, dtype)
        elif self.api in ("paged", "decode"):
            forward = self._paged(flashinfer, case, inputs, dtype)
        else:
            forward = self._bsr(flashinfer, case, inputs, dtype)
        call_or_unsupported(self.name, forward)  # JIT-compiles on first use: outside every sample
        torch.cuda.synchronize(dev)
        return forward

    def _workspace(self, dev: Any) -> Any:
        import torch

        return torch.zeros(WORKSPACE_BYTES, dtype=torch.uint8, device=dev)

    def _ragged(self, fi: Any, case: AttnCase, inputs: Inputs, dtype: Any) -> ForwardFn:
        import torch

        wrapper = fi.BatchPrefillWithRaggedKVCacheWrapper(self._workspace(inputs.q.device), "NHD")
        wanted: dict[str, Any] = {"sm_scale": case.scale, "q_data_type": dtype, "kv_data_type": dtype}
        flags = _window_left(case)
        if flags is not None:
            wanted.update(causal=flags[0], window_left=flags[1])
        else:  # one dense mask per sequence, flattened and concatenated; plan() packs it
            parts = [dense_mask(case.mask, sq, sk, inputs.q.device).reshape(-1)
                     for sq, sk in zip(case.seqlens_q, case.seqlens_k, strict=True)]
            wanted["custom_mask"] = torch.cat(parts)
        assert inputs.cu_seqlens_q is not None and inputs.cu_seqlens_k is not None
        with refusal(self.name):
            wrapper.plan(inputs.cu_seqlens_q, inputs.cu_seqlens_k, case.heads_q, case.heads_kv, case.head_dim_qk,
                         **fi_kwargs(wrapper.plan, wanted, optional=("kv_data_type",)))
        q, k, v = inputs.q, inputs.k, inputs.v
        return lambda: wrapper.run(q, k, v)

    def _paged(self, fi: Any, case: AttnCase, inputs: Inputs, dtype: Any) -> ForwardFn:
        k_pages, v_pages, indptr, indices, last = paged_kv(inputs.k, inputs.v, case.seqlens_k, self.page_size)
        flags = _window_left(case)
        assert flags is not None
        wanted: dict[str, Any] = {"sm_scale": case.scale, "q_data_type": dtype, "kv_data_type": dtype}
        if flags[1] >= 0:
            wanted["window_left"] = flags[1]
        ws = self._workspace(inputs.q.device)
        if self.api == "decode":
            wrapper = fi.BatchDecodeWithPagedKVCacheWrapper(ws, "NHD", use_tensor_cores=self.tensor_cores)
            with refusal(self.name, hint=None if self.tensor_cores else
                         "its tensor-core decode (flashinfer-decode-tc-p16) takes any group size"):
                wrapper.plan(indptr, indices, last, case.heads_q, case.heads_kv, case.head_dim_qk, self.page_size,
                             **fi_kwargs(wrapper.plan, wanted, optional=("kv_data_type",)))
        else:
            wrapper = fi.BatchPrefillWithPagedKVCacheWrapper(ws, "NHD")
            wanted["causal"] = flags[0]
            assert inputs.cu_seqlens_q is not None
            with refusal(self.name):
                wrapper.plan(inputs.cu_seqlens_q, indptr, indices, last, case.heads_q, case.heads_kv,
                             case.head_dim_qk, self.page_size,
                             **fi_kwargs(wrapper.plan, wanted, optional=("kv_data_type",)))
        q, cache = inputs.q, (k_pages, v_pages)
        return lambda: wrapper.run(q, cache)

    def _bsr(self, fi: Any, case: AttnCase, inputs: Inputs, dtype: Any) -> ForwardFn:
        import torch

        from ..mask_formats import bsr_block_width, to_bsr

        sq, sk = case.max_seqlen_q, case.max_seqlen_k
        width = bsr_block_width(sk, BSR_TILE, BSR_SMALLEST_TILE)
        if width is None:
            raise Unsupported(f"no block-sparse tile width divides seqlen_k={sk}")
        bsr = to_bsr(dense_mask_np(effective_mask(case), sq, sk), width, width)
        dev = inputs.q.device
        wrapper = fi.BlockSparseAttentionWrapper(self._workspace(dev))
        wanted: dict[str, Any] = {"sm_scale": case.scale, "q_data_type": dtype, "kv_data_type": dtype,
                                  "o_data_type": dtype}
        if bsr.tile_masks is not None:
            wanted["mask"] = torch.from_numpy(bsr.tile_masks).to(dev)
        with refusal(self.name):
            wrapper.plan(torch.from_numpy(bsr.indptr).to(dev), torch.from_numpy(bsr.indices).to(dev), sq, sk,
                         bsr.R, bsr.C, case.heads_q, case.heads_kv, case.head_dim_qk,
                         **fi_kwargs(wrapper.plan, wanted, optional=("kv_data_type", "o_data_type")))
        q, k, v = inputs.q, inputs.k, inputs.v
        return lambda: wrapper.run(q, k, v)


def paged_kv(k: Any, v: Any, seqlens: tuple[int, ...], page: int, seed: int = 0) -> tuple[Any, ...]:
    """Packed ``(total, h, d)`` k and v copied into ``page``-key pages in a shuffled order, with
    FlashInfer's ``indptr``, ``indices`` and ``last_page_len`` (int32)."""
    import torch

    counts = [-(-n // page) for n in seqlens]
    total = sum(counts)
    gen = torch.Generator(device="cpu").manual_seed(seed)
    order = torch.randperm(total, generator=gen)
    pages = []
    for t in (k, v):
        out = torch.zeros((total, page, *t.shape[1:]), dtype=t.dtype, device=t.device)
        start, first = 0, 0
        for n, c in zip(seqlens, counts, strict=True):
            padded = torch.zeros((c * page, *t.shape[1:]), dtype=t.dtype, device=t.device)
            padded[:n] = t[start : start + n]
            out[order[first : first + c].to(t.device)] = padded.view(c, page, *t.shape[1:])
            start, first = start + n, first + c
        pages.append(out)
    indptr = torch.tensor([0, *itertools.accumulate(counts)], dtype=torch.int32, device=k.device)
    indices = order.to(torch.int32).to(k.device)
    last = torch.tensor([n - page * (c - 1) for n, c in zip(seqlens, counts, strict=True)], dtype=torch.int32,
                        device=k.device)
    return pages[0], pages[1], indptr, indices, last


FLASHINFER_BACKENDS = (
    FlashInferBackend("single"),
    FlashInferBackend("ragged"),
    FlashInferBackend("paged", 16),
    FlashInferBackend("decode", 16),
    FlashInferBackend("decode", 256),
    FlashInferBackend("decode", 16, tensor_cores=True),
    FlashInferBackend("custom"),
    FlashInferBackend("packed"),
    FlashInferBackend("bsr"),
)
