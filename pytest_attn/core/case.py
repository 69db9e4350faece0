"""The attention case: one problem, one back end, validated on construction.

An :class:`AttnCase` is frozen and hashable, and carries everything a back end needs to build its
inputs and everything the FLOP/byte model needs to count work. Its :attr:`AttnCase.id` is the
readable pytest id, e.g. ``sdpa-flash-hunyuan-video-bf16-full-fwd``.

Causal alignment: ``Mask.causal()`` is aligned **bottom-right**, as flash-attn and FlashInfer do
when ``seqlen_q != seqlen_k``: query ``i`` sees keys ``j <= i + (seqlen_k - seqlen_q)``. PyTorch
SDPA's ``is_causal=True`` is top-left (``tril(diagonal=0)``); the two agree only when the lengths
are equal, and the SDPA back ends pass an explicit bottom-right mask otherwise.

Sliding window: ``Mask.window(left, right)`` uses flash-attn's convention: query ``i`` sees keys
in ``[i + sk - sq - left, i + sk - sq + right]``; ``-1`` means unbounded on that side. Causal is
``window(-1, 0)``.

Forms beyond plain softmax attention (sinks, absorbed MLA, an fp8 KV cache): :mod:`pytest_attn.core.forms`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Literal

from .forms import FORMS, KV_DTYPES, MLA_SOFTMAX_SCALE, CaseError, form_problem

if TYPE_CHECKING:
    import numpy as np

__all__ = ["DTYPES", "FORMS", "KV_DTYPES", "MLA_SOFTMAX_SCALE", "AttnCase", "CaseError", "KvCache", "Mask"]


Dtype = Literal["fp16", "bf16", "fp32", "fp8"]
DTYPES: tuple[str, ...] = ("fp16", "bf16", "fp32", "fp8")
DTYPE_BYTES: dict[str, int] = {"fp16": 2, "bf16": 2, "fp32": 4, "fp8": 1}
#: Other spellings of :data:`DTYPES` a user may type: torch's names, with or without ``torch.``.
DTYPE_ALIASES: dict[str, str] = {"float16": "fp16", "half": "fp16", "bfloat16": "bf16", "float32": "fp32",
                                 "float": "fp32", "float8_e4m3fn": "fp8", "e4m3": "fp8"}


def canonical_dtype(name: str) -> str:
    """``float16``, ``torch.bfloat16``, ``FP32`` -> the short name of :data:`DTYPES`; anything else unchanged
    (the caller says what is valid)."""
    key = name.strip().lower().removeprefix("torch.")
    return DTYPE_ALIASES.get(key, key)

Direction = Literal["fwd", "fwd+bwd"]
DIRECTIONS: tuple[str, ...] = ("fwd", "fwd+bwd")
_DIRECTION_IDS = {"fwd": "fwd", "fwd+bwd": "fwdbwd"}

MaskKind = Literal["none", "causal", "window", "custom"]
MASK_KINDS: tuple[str, ...] = ("none", "causal", "window", "custom")

#: A custom mask: ``fn(seqlen_q, seqlen_k)`` returns a boolean array of shape
#: ``(seqlen_q, seqlen_k)``, True where the query may see the key.
MaskFn = Callable[[int, int], "np.ndarray"]
#: A custom mask by rows: ``rows_fn(seqlen_q, seqlen_k, rows)`` returns the ``(len(rows), seqlen_k)``
#: rows of the same array, so a few rows of a 111,856-token mask cost kilobytes, not 12.5 GB.
MaskRowsFn = Callable[[int, int, "np.ndarray"], "np.ndarray"]




@dataclass(frozen=True)
class Mask:
    """Which (query, key) pairs are visible. Build with the class methods (or the builders of
    :mod:`pytest_attn.core.masks`). A custom mask is identified by its name: two with the same name are
    taken to be the same mask (its visible-pair counts are cached by name and lengths)."""

    kind: str = "none"
    window_left: int = -1
    window_right: int = -1
    name: str = ""
    fn: MaskFn | None = field(default=None, compare=False, repr=False)
    rows_fn: MaskRowsFn | None = field(default=None, compare=False, repr=False)

    def __post_init__(self) -> None:
        if self.kind not in MASK_KINDS:
            raise CaseError(f"mask.kind={self.kind!r} is not one of {', '.join(MASK_KINDS)}")
        for side in ("window_left", "window_right"):
            value = getattr(self, side)
            if not isinstance(value, int) or value < -1:
                raise CaseError(f"mask.{side}={value!r} must be an int >= -1 (-1 means unbounded)")
        if self.kind == "custom" and ((self.fn is None and self.rows_fn is None) or not self.name):
            raise CaseError("a custom mask needs a name and fn(seqlen_q, seqlen_k) -> bool array")
        if self.kind == "custom" and any(c.isspace() for c in self.name):
            raise CaseError(f"custom mask name {self.name!r} must have no spaces (it is part of test ids)")

    @classmethod
    def none(cls) -> Mask:
        return cls("none")

    @classmethod
    def causal(cls) -> Mask:
        """Bottom-right aligned causal mask (flash-attn / FlashInfer convention)."""
        return cls("causal", -1, 0)

    @classmethod
    def window(cls, left: int, right: int = 0) -> Mask:
        return cls("window", left, right)

    @classmethod
    def custom(cls, name: str, fn: MaskFn | None = None, *, rows_fn: MaskRowsFn | None = None) -> Mask:
        """A named mask given as a whole array (``fn``) and/or by rows (``rows_fn``, preferred for
        long sequences). :mod:`pytest_attn.core.masks` has builders for the common ones."""
        return cls("custom", name=name, fn=fn, rows_fn=rows_fn)

    @classmethod
    def named(cls, name: str) -> Mask:
        """A custom mask known by its name only, as a result read back from JSON carries it when
        :func:`pytest_attn.core.codec.mask_from_id` cannot rebuild it: ids, groups and equality work;
        asking for its rows says why they are not known."""

        def rows(seqlen_q: int, seqlen_k: int, picked: np.ndarray) -> np.ndarray:
            raise CaseError(f"mask {name!r} was read back by its name only: its rows are not known here")

        return cls("custom", name=name, rows_fn=rows)

    def rows(self, seqlen_q: int, seqlen_k: int, rows: np.ndarray) -> np.ndarray:
        """Rows of a custom mask as a bool ``(len(rows), seqlen_k)`` array."""
        import numpy as np
        if self.rows_fn is not None:
            out = np.asarray(self.rows_fn(seqlen_q, seqlen_k, np.asarray(rows)), dtype=bool)
        else:
            assert self.fn is not None
            out = np.asarray(self.fn(seqlen_q, seqlen_k), dtype=bool)
            if out.shape != (seqlen_q, seqlen_k):
                raise CaseError(
                    f"custom mask {self.name!r} returned shape {out.shape}, expected ({seqlen_q}, {seqlen_k})"
                )
            out = out[np.asarray(rows)]
        if out.shape != (len(rows), seqlen_k):
            raise CaseError(f"custom mask {self.name!r} returned rows of shape {out.shape},"
                            f" expected ({len(rows)}, {seqlen_k})")
        return out

    @property
    def id(self) -> str:
        if self.kind == "none":
            return "full"
        if self.kind == "causal":
            return "causal"
        if self.kind == "window":
            return f"win{self.window_left}-{self.window_right}"
        return self.name

    @property
    def bounds(self) -> tuple[int, int] | None:
        """(left, right) window bounds for causal and window masks, else None."""
        if self.kind in ("causal", "window"):
            return (self.window_left, self.window_right)
        return None


@dataclass(frozen=True)
class KvCache:
    """A serving batch's KV cache: ``capacity`` keys allocated per request, of which request ``i`` holds
    ``seqlens_k[i] - append`` before the call; the call first writes ``append`` new keys and values per
    request at that position (the new tokens, which are also the queries), then attends over
    ``seqlens_k[i]`` keys. ``slots`` > 0 allocates that many cache rows and places the requests in
    shuffled rows (flash-attn's ``cache_batch_idx``). ``drawn`` says how the lengths were drawn."""

    capacity: int
    append: int = 0
    slots: int = 0
    drawn: str = ""

    def __post_init__(self) -> None:
        for name in ("capacity", "append", "slots"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value < (1 if name == "capacity" else 0):
                raise CaseError(f"cache.{name}={value!r} must be an int >= {1 if name == 'capacity' else 0}")

    def cached(self, seqlens_k: tuple[int, ...]) -> tuple[int, ...]:
        """Each request's cache length before the call."""
        return tuple(n - self.append for n in seqlens_k)


@dataclass(frozen=True)
class AttnCase:
    """One attention problem on one back end.

    Sequence lengths are per sequence, so a uniform batch of 8 x 1024 is ``seqlens_q=(1024,) * 8``;
    build it with :meth:`dense`. A batch whose lengths differ is *ragged* and runs only on back ends
    that take packed (varlen) inputs.
    """

    backend: str
    shape: str
    seqlens_q: tuple[int, ...]
    seqlens_k: tuple[int, ...]
    heads_q: int
    heads_kv: int
    head_dim_qk: int
    head_dim_v: int
    dtype: str = "bf16"
    mask: Mask = field(default_factory=Mask.none)
    direction: str = "fwd"
    softmax_scale: float | None = None
    cache: KvCache | None = None  # a serving batch's KV cache (decode against ragged caches, appends)
    sinks: bool = False  # a learnable sink logit per query head in the softmax denominator
    latent_kv: bool = False  # absorbed MLA: the values are the first head_dim_v columns of the key
    kv_dtype: str | None = None  # "fp8": keys and values in e4m3 with a per-tensor scale (None: the case's dtype)

    def __post_init__(self) -> None:
        _check_name("backend", self.backend)
        _check_name("shape", self.shape)
        if not isinstance(self.seqlens_q, tuple) or not isinstance(self.seqlens_k, tuple):
            raise CaseError("seqlens_q and seqlens_k must be tuples of ints (one length per sequence)")
        if not self.seqlens_q:
            raise CaseError("seqlens_q is empty: a case needs at least one sequence")
        if len(self.seqlens_q) != len(self.seqlens_k):
            raise CaseError(
                f"seqlens_q has {len(self.seqlens_q)} sequences but seqlens_k has {len(self.seqlens_k)}:"
                " give one q length and one k length per sequence"
            )
        for name in ("seqlens_q", "seqlens_k"):
            for i, n in enumerate(getattr(self, name)):
                if not isinstance(n, int) or isinstance(n, bool):
                    raise CaseError(f"{name}[{i}]={n!r} is not an int")
                if n < 0:
                    raise CaseError(f"{name}[{i}]={n} is negative: lengths must be >= 1")
                if n == 0:
                    raise CaseError(f"{name}[{i}]=0: every sequence needs at least one token")
        for name in ("heads_q", "heads_kv", "head_dim_qk", "head_dim_v"):
            value = getattr(self, name)
            if not isinstance(value, int) or isinstance(value, bool) or value <= 0:
                raise CaseError(f"{name}={value!r} must be a positive int")
        if self.heads_q % self.heads_kv:
            raise CaseError(
                f"heads_kv={self.heads_kv} does not divide heads_q={self.heads_q}:"
                " GQA/MQA needs heads_q to be a multiple of heads_kv"
            )
        if self.dtype not in DTYPES:
            raise CaseError(f"dtype={self.dtype!r} is not one of {', '.join(DTYPES)}")
        if self.direction not in DIRECTIONS:
            raise CaseError(f"direction={self.direction!r} is not one of {', '.join(DIRECTIONS)}")
        if self.softmax_scale is not None and not self.softmax_scale > 0:
            raise CaseError(f"softmax_scale={self.softmax_scale!r} must be positive (or None for 1/sqrt(d))")
        if self.cache is not None:
            self._check_cache(self.cache)
        problem = form_problem(self)
        if problem:
            raise CaseError(problem)

    def _check_cache(self, cache: KvCache) -> None:
        if len(set(self.seqlens_q)) > 1:
            raise CaseError(f"a KV-cache case has the same number of queries per request, not {list(self.seqlens_q)}")
        if cache.capacity < self.max_seqlen_k:
            raise CaseError(f"cache.capacity={cache.capacity} is under the longest request's"
                            f" {self.max_seqlen_k} keys")
        if cache.append and cache.append != self.seqlens_q[0]:
            raise CaseError(f"cache.append={cache.append}: the appended tokens are the queries, so each request"
                            f" needs {cache.append} queries, not {self.seqlens_q[0]}")
        if cache.append > min(self.seqlens_k):
            raise CaseError(f"cache.append={cache.append} is more than a request's {min(self.seqlens_k)} keys")
        if cache.slots and cache.slots < self.batch:
            raise CaseError(f"cache.slots={cache.slots} is under the batch of {self.batch} requests")
        if self.direction != "fwd":
            raise CaseError("a KV-cache case is a forward (decode) step: direction must be fwd")

    @classmethod
    def dense(
        cls,
        *,
        backend: str,
        shape: str,
        batch: int,
        seqlen_q: int,
        seqlen_k: int | None = None,
        heads_q: int,
        heads_kv: int | None = None,
        head_dim: int,
        head_dim_v: int | None = None,
        dtype: str = "bf16",
        mask: Mask | None = None,
        direction: str = "fwd",
    ) -> AttnCase:
        """A uniform batch: every sequence has ``seqlen_q`` queries and ``seqlen_k`` keys."""
        if not isinstance(batch, int) or batch <= 0:
            raise CaseError(f"batch={batch!r} must be a positive int")
        sk = seqlen_q if seqlen_k is None else seqlen_k
        return cls(
            backend=backend,
            shape=shape,
            seqlens_q=(seqlen_q,) * batch,
            seqlens_k=(sk,) * batch,
            heads_q=heads_q,
            heads_kv=heads_q if heads_kv is None else heads_kv,
            head_dim_qk=head_dim,
            head_dim_v=head_dim if head_dim_v is None else head_dim_v,
            dtype=dtype,
            mask=mask if mask is not None else Mask.none(),
            direction=direction,
        )

    @classmethod
    def mla(cls, *, backend: str, shape: str, batch: int, seqlen_k: int, seqlen_q: int = 1, heads_q: int = 128,
            latent: int = 512, rope: int = 64, dtype: str = "bf16", kv_dtype: str | None = None,
            mask: Mask | None = None, softmax_scale: float | None = MLA_SOFTMAX_SCALE) -> AttnCase:
        """Absorbed MLA decode as DeepSeek-V3 runs it: ``heads_q`` query heads over one latent KV head of
        ``latent + rope`` columns, values the first ``latent`` of them, scale 1/sqrt(192) by default."""
        if not isinstance(batch, int) or batch <= 0:
            raise CaseError(f"batch={batch!r} must be a positive int")
        return cls(backend=backend, shape=shape, seqlens_q=(seqlen_q,) * batch, seqlens_k=(seqlen_k,) * batch,
                   heads_q=heads_q, heads_kv=1, head_dim_qk=latent + rope, head_dim_v=latent, dtype=dtype,
                   mask=mask if mask is not None else Mask.none(), softmax_scale=softmax_scale, latent_kv=True,
                   kv_dtype=kv_dtype)

    # ---- derived facts -------------------------------------------------------------------
    @property
    def forms(self) -> tuple[str, ...]:
        """The forms of :data:`FORMS` this case uses, in that order."""
        used = {"sinks": self.sinks, "latent-kv": self.latent_kv, "fp8-kv": self.kv_dtype == "fp8"}
        return tuple(f for f in FORMS if used[f])

    @property
    def kv_elem_bytes(self) -> int:
        """Bytes per key or value element (the KV cache's dtype where it has its own)."""
        return DTYPE_BYTES[self.kv_dtype] if self.kv_dtype is not None else self.elem_bytes

    @property
    def batch(self) -> int:
        return len(self.seqlens_q)

    @property
    def ragged(self) -> bool:
        """True when sequences differ in length (needs packed/varlen inputs)."""
        return len(set(self.seqlens_q)) > 1 or len(set(self.seqlens_k)) > 1

    @property
    def max_seqlen_q(self) -> int:
        return max(self.seqlens_q)

    @property
    def max_seqlen_k(self) -> int:
        return max(self.seqlens_k)

    @property
    def total_q(self) -> int:
        return sum(self.seqlens_q)

    @property
    def total_k(self) -> int:
        return sum(self.seqlens_k)

    @property
    def scale(self) -> float:
        return self.softmax_scale if self.softmax_scale is not None else self.head_dim_qk**-0.5

    @property
    def elem_bytes(self) -> int:
        return DTYPE_BYTES[self.dtype]

    @property
    def direction_id(self) -> str:
        return _DIRECTION_IDS[self.direction]

    @property
    def group(self) -> str:
        """The problem without the back end: results in one group are directly comparable."""
        dtype = self.dtype + (f"-kv{self.kv_dtype}" if self.kv_dtype else "")
        extra = ("-sinks" if self.sinks else "") + ("-latent" if self.latent_kv else "")
        return f"{self.shape}-{dtype}-{self.mask.id}{extra}-{self.direction_id}"

    @property
    def id(self) -> str:
        return f"{self.backend}-{self.group}"

    def describe(self) -> str:
        """One line with every number, for messages and the summary."""
        if self.ragged:
            lengths = f"varlen q={_lengths(self.seqlens_q)} k={_lengths(self.seqlens_k)}"
        else:
            lengths = f"{self.batch} x sq={self.seqlens_q[0]} sk={self.seqlens_k[0]}"
        heads = f"{self.heads_q}q/{self.heads_kv}kv heads"
        dims = f"d={self.head_dim_qk}" + ("" if self.head_dim_v == self.head_dim_qk else f"/{self.head_dim_v}")
        cache = ""
        if self.cache is not None:
            c = self.cache
            cache = (f", cache of {c.capacity:,} keys per request{f' in {c.slots} shuffled slots' if c.slots else ''}"
                     f"{f', {c.append} appended per request' if c.append else ''}{f' ({c.drawn})' if c.drawn else ''}")
        dtype = self.dtype + (f" (KV cache {self.kv_dtype} with a per-tensor scale)" if self.kv_dtype else "")
        forms = (", sink logit per head" if self.sinks else "") + (
            f", latent KV (values = the key's first {self.head_dim_v} columns)" if self.latent_kv else "")
        return f"{lengths}, {heads}, {dims}, {dtype}, mask={self.mask.id}{forms}, {self.direction}{cache}"


def _lengths(values: tuple[int, ...], shown: int = 8) -> str:
    """A length list for a sentence: whole up to ``shown`` entries, else its ends and its sum."""
    if len(values) <= shown:
        return str(list(values))
    head, tail = ", ".join(map(str, values[:4])), ", ".join(map(str, values[-2:]))
    return f"[{head}, ..., {tail}] ({len(values)} sequences, {sum(values):,} tokens)"


def _check_name(field_name: str, value: object) -> None:
    if not isinstance(value, str) or not value or any(c.isspace() for c in value):
        raise CaseError(f"{field_name}={value!r} must be a non-empty name without spaces")
