"""Hypothesis strategies for attention cases: varlen batches, head layouts, masks, dtypes, scales.

Every strategy is keyword-only and checks its arguments (a bad bound raises Hypothesis'
``InvalidArgument`` at once, naming it). Values are drawn simplest first -- one short sequence, one
head, no mask, the default scale -- so failures shrink to small, readable cases. Lengths favour the
ones kernels get wrong: 1, primes, and just below / at / above tile sizes (63/64/65, 127/128/129),
plus a few long ones when asked for.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from hypothesis import strategies as st
from hypothesis.errors import InvalidArgument

from ..core.case import DIRECTIONS, DTYPES, AttnCase, KvCache, Mask
from ..core.masks import prefix_lm, random_block_sparse

INTERESTING_LENGTHS: tuple[int, ...] = (1, 2, 3, 5, 7, 13, 17, 31, 63, 64, 65, 127, 128, 129)
LONG_LENGTHS: tuple[int, ...] = (255, 256, 257, 509, 1021)
MASK_KINDS: tuple[str, ...] = ("none", "causal", "window", "blocksparse", "prefixlm")
#: How a sequence's key length relates to its query length; "serving" is decode against a KV cache of
#: ragged lengths with appends (:func:`kv_cache_batches`).
RELATIONS: tuple[str, ...] = ("self", "prefix", "decode", "cross", "serving")
#: Cache lengths around the page sizes (FlashInfer 16, flash-attn 256), where paged kernels go wrong.
PAGE_EDGES: tuple[int, ...] = (15, 16, 17, 31, 32, 33, 255, 256, 257)


T = TypeVar("T")


def _made(factory: Callable[..., st.SearchStrategy[T]], *args: Any, **kwargs: Any) -> st.SearchStrategy[T]:
    """The strategy ``factory(*args, **kwargs)`` makes, made once: Hypothesis validates a strategy object the first
    time it is drawn from, and a fresh one at every draw spent 3 of 8 CPU-s of a fuzz run on that (py-spy)."""
    try:
        hash((args, tuple(kwargs.items())))
    except TypeError:  # a list in a hand-made Space: made each time
        return factory(*args, **kwargs)
    return _made_once(factory, *args, **kwargs)


#: One object: Hypothesis makes a new ``just`` at each call, which would miss :func:`_made`'s cache every time.
_ZERO = st.just(0)


@functools.lru_cache(maxsize=1024)
def _made_once(factory: Callable[..., st.SearchStrategy[T]], *args: Any, **kwargs: Any) -> st.SearchStrategy[T]:
    return factory(*args, **kwargs)


def _check_positive(name: str, value: int) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise InvalidArgument(f"{name}={value!r} must be a positive int")


def _check_subset(name: str, values: Sequence[str], allowed: Sequence[str]) -> None:
    if not values:
        raise InvalidArgument(f"{name} is empty: give at least one of {', '.join(allowed)}")
    bad = [v for v in values if v not in allowed]
    if bad:
        raise InvalidArgument(f"{name} has {bad!r}; choose from {', '.join(allowed)}")


def lengths(*, max_len: int = 129, long: bool = False) -> st.SearchStrategy[int]:
    """One sequence length: an interesting one (1, primes, tile edges) or any up to ``max_len``;
    with ``long``, sometimes one of :data:`LONG_LENGTHS` that fits."""
    _check_positive("max_len", max_len)
    picks = [n for n in INTERESTING_LENGTHS if n <= max_len]
    if long:
        picks += [n for n in LONG_LENGTHS if n <= max_len]
    return st.one_of(st.sampled_from(picks), st.integers(1, max_len))


@st.composite
def varlen_lengths(
    draw: st.DrawFn,
    *,
    max_seqs: int = 4,
    max_len: int = 129,
    long: bool = False,
    ragged: bool = True,
    relations: Sequence[str] = RELATIONS,
) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """(seqlens_q, seqlens_k) of a batch of 1 ... ``max_seqs`` sequences. Per sequence, the key
    length relates to the query length as in self-attention (equal), chunked prefill (a prefix of
    cached keys), decode (1-4 queries against a cache) or cross-attention (unrelated: q may be
    longer than k). With ``ragged=False`` every sequence has the same lengths."""
    _check_positive("max_seqs", max_seqs)
    _check_positive("max_len", max_len)
    _check_subset("relations", relations, RELATIONS)
    count = draw(st.integers(1, max_seqs))
    relation = draw(_made(st.sampled_from, tuple(relations)))
    one = _made(lengths, max_len=max_len, long=long)

    def pair() -> tuple[int, int]:
        if relation == "self":
            n = draw(one)
            return n, n
        if relation == "prefix":
            q = draw(one)
            return q, min(max_len, q + draw(st.integers(1, max_len)))
        if relation == "decode":  # a cache longer than the queries (else it is self-attention)
            q = draw(st.integers(1, min(4, max_len)))
            return q, min(max_len, max(q + 1, draw(one)))
        return draw(one), draw(one)

    pairs = [pair() for _ in range(count if ragged else 1)]
    if not ragged:
        pairs = pairs * count
    return tuple(p[0] for p in pairs), tuple(p[1] for p in pairs)


@st.composite
def kv_cache_batches(
    draw: st.DrawFn,
    *,
    max_seqs: int = 4,
    max_len: int = 129,
    long: bool = False,
    slots: bool = True,
    queries: int | None = None,
) -> tuple[tuple[int, ...], tuple[int, ...], KvCache]:
    """(seqlens_q, seqlens_k, cache) of a serving step: 1 ... ``max_seqs`` requests whose caches hold
    different lengths -- empty, one key, page edges, anything up to ``max_len`` (or a long one) -- and
    0, 1, 2 or 4 new tokens appended per request (which are then its queries); the cache exactly full
    or with room to spare; with ``slots``, requests in shuffled rows of a larger cache. ``queries``
    fixes the queries per request (a decode-only back end: 1)."""
    _check_positive("max_seqs", max_seqs)
    _check_positive("max_len", max_len)
    count = draw(st.integers(1, max_seqs))
    appends = [0, 1] if queries == 1 else [1, 0, 2, 4]
    append = draw(_made(st.sampled_from, tuple(a for a in appends if a <= max_len)))
    q = append or (queries or draw(st.integers(1, min(4, max_len))))
    edges = tuple(n for n in (0, 1, *PAGE_EDGES, *(LONG_LENGTHS if long else ())) if n + append <= max_len)
    one = _made(st.one_of, _made(st.sampled_from, edges), st.integers(0, max_len - append))
    cached = [draw(one) for _ in range(count)]
    seqlens_k = tuple(max(n + append, q) for n in cached)  # at least as many keys as queries
    room = draw(_made(st.one_of, _ZERO, st.integers(1, 64)))
    rows = draw(_made(st.one_of, _ZERO, st.integers(count, count + 3))) if slots else 0
    cache = KvCache(max(seqlens_k) + room, append, rows, "fuzz")
    return (q,) * count, seqlens_k, cache


@st.composite
def head_layouts(draw: st.DrawFn, *, max_kv_heads: int = 3, max_group: int = 8, gqa: bool = True) -> tuple[int, int]:
    """(heads_q, heads_kv): MHA, or with ``gqa`` every ratio from 2 to ``max_group`` (MQA included)."""
    _check_positive("max_kv_heads", max_kv_heads)
    _check_positive("max_group", max_group)
    kv = draw(st.integers(1, max_kv_heads))
    group = draw(st.integers(1, max_group)) if gqa else 1
    return kv * group, kv


def masks(*, kinds: Sequence[str] = MASK_KINDS, max_window: int = 130) -> st.SearchStrategy[Mask]:
    """A mask of one of ``kinds``: none, bottom-right causal, sliding window (either side may be
    unbounded), random block-sparse (seeded, tiles of 1-16), prefix-LM."""
    _check_subset("kinds", kinds, MASK_KINDS)
    _check_positive("max_window", max_window)
    side = st.one_of(st.just(-1), st.integers(0, max_window))
    options = {
        "none": st.just(Mask.none()),
        "causal": st.just(Mask.causal()),
        "window": st.builds(Mask.window, side, side).filter(lambda m: m.bounds != (-1, -1)),
        "blocksparse": st.builds(random_block_sparse, st.sampled_from([1, 4, 16]),
                                 st.sampled_from([0.1, 0.25, 0.5, 0.75]), st.integers(0, 99)),
        "prefixlm": st.builds(prefix_lm, st.integers(0, max_window)),
    }
    return st.one_of(*(options[k] for k in kinds))


def softmax_scales() -> st.SearchStrategy[float | None]:
    """None (1/sqrt(d)) or an explicit scale, including ones far from the default."""
    return st.one_of(st.none(), st.sampled_from([0.05, 0.3, 1.0, 2.0]),
                     st.floats(0.01, 2.0, allow_nan=False, allow_infinity=False))


@dataclass(frozen=True)
class Space:
    """What a back end can be fuzzed with (found by probing its ``supports()``).

    ``by_relation`` names, per relation of key to query lengths (:data:`RELATIONS`), the mask kinds the
    back end takes with it: a kernel may take decode lengths without a mask and refuse them with a
    causal one, and must not lose decode for that. Left empty, it follows from ``mask_kinds``,
    ``cross`` and ``q_longer`` (every kind for every relation those allow)."""

    dtypes: tuple[str, ...]
    head_dims: tuple[int, ...]
    mask_kinds: tuple[str, ...]
    ragged: bool
    gqa: bool
    cross: bool  # seqlen_q != seqlen_k
    q_longer: bool  # seqlen_q > seqlen_k (rows without keys under causal masks)
    max_len: int = 129
    max_seqs: int = 4
    long: bool = False
    head_dim_v_differs: bool = False
    queries: int | None = None  # a decode-only back end: this many queries per sequence
    by_relation: tuple[tuple[str, tuple[str, ...]], ...] = ()
    cache_slots: bool = False  # serving batches may place requests in shuffled cache rows
    # the forms beyond plain attention (forward only), each drawn for half the cases where the back end takes it
    sinks: bool = False  # a sink logit per query head
    sinks_only: bool = False  # a back end that takes sink cases only: every forward case drawn has sinks
    kv_fp8: bool = False  # an fp8 KV cache with per-tensor scales
    dim_pairs: tuple[tuple[int, int], ...] = ()  # unequal (head_dim_qk, head_dim_v), e.g. DeepSeek's (192, 128)
    mla_dims: tuple[tuple[int, int], ...] = ()  # absorbed MLA (latent + rope, latent), one latent KV head
    latent_only: bool = False  # an MLA kernel (FlashMLA, FlashInfer's MLA): every case drawn is latent

    def __post_init__(self) -> None:
        _check_subset("dtypes", self.dtypes, DTYPES)
        for name in ("dim_pairs", "mla_dims"):
            pairs = getattr(self, name)
            if any(len(p) != 2 or min(p) < 1 for p in pairs):
                raise InvalidArgument(f"{name}={pairs!r} must be (head_dim_qk, head_dim_v) pairs of positive ints")
        if any(dv >= d for d, dv in self.mla_dims):
            raise InvalidArgument(f"mla_dims={self.mla_dims!r}: each latent (head_dim_v) must be under its key's"
                                  " head_dim_qk (latent + rope)")
        _check_subset("mask_kinds", self.mask_kinds, MASK_KINDS)
        if not self.head_dims or any(d < 1 for d in self.head_dims):
            raise InvalidArgument(f"head_dims={self.head_dims!r} must be one or more positive ints")
        for relation, kinds in self.by_relation:
            _check_subset("by_relation", (relation,), RELATIONS)
            _check_subset(f"by_relation[{relation!r}]", kinds, MASK_KINDS)

    def relation_kinds(self) -> dict[str, tuple[str, ...]]:
        """The relations this space draws, each with the mask kinds drawn with it (in RELATIONS order)."""
        if self.by_relation:
            given = dict(self.by_relation)
            return {r: given[r] for r in RELATIONS if r in given}
        if self.queries is not None:
            return {"decode": self.mask_kinds}
        relations = [r for r in RELATIONS if (self.cross or r == "self") and r != "serving"]
        if not self.q_longer:
            relations = [r for r in relations if r != "cross"]
        return {r: self.mask_kinds for r in relations}


@st.composite
def attn_cases(
    draw: st.DrawFn, *, backend: str, space: Space, direction: str = "fwd", relations: Sequence[str] | None = None
) -> AttnCase:
    """A whole case for ``backend`` within ``space``; with ``relations``, only those of the space's
    relations (the fuzzer draws one first, to count what it ran)."""
    if direction not in DIRECTIONS:
        raise InvalidArgument(f"direction={direction!r} is not one of {', '.join(DIRECTIONS)}")
    kinds_by = space.relation_kinds()
    if relations is not None:
        _check_subset("relations", relations, list(kinds_by))
        kinds_by = {r: kinds_by[r] for r in relations}
    relation = draw(_made(st.sampled_from, tuple(kinds_by)))
    cache = None
    if relation == "serving":
        sq, sk, cache = draw(_made(kv_cache_batches, max_seqs=space.max_seqs, max_len=space.max_len,
                                   long=space.long, slots=space.cache_slots, queries=space.queries))
    else:
        sq, sk = draw(_made(varlen_lengths, max_seqs=space.max_seqs, max_len=space.max_len, long=space.long,
                            ragged=space.ragged, relations=(relation,)))
    if space.queries is not None:
        sq = (space.queries,) * len(sq)
    if relation != "cross":  # only cross-attention has more queries than keys
        sk = tuple(max(q, k) for q, k in zip(sq, sk, strict=True))
    hq, hkv = draw(_made(head_layouts, gqa=space.gqa))
    forward = direction == "fwd"
    latent = forward and bool(space.mla_dims) and (space.latent_only or draw(st.booleans()))
    if latent:  # many query heads over one latent KV head
        hq, hkv = draw(st.integers(1, 16)), 1
        d, dv = draw(_made(st.sampled_from, space.mla_dims))
    elif bool(space.dim_pairs) and draw(st.booleans()):
        d, dv = draw(_made(st.sampled_from, space.dim_pairs))
    else:
        d = draw(_made(st.sampled_from, space.head_dims))
        dv = draw(_made(st.sampled_from, space.head_dims)) if space.head_dim_v_differs else d
    dtype = draw(_made(st.sampled_from, space.dtypes))
    sinks = forward and space.sinks and (space.sinks_only or draw(st.booleans()))
    kv_fp8 = forward and space.kv_fp8 and dtype != "fp8" and draw(st.booleans())
    return AttnCase(
        backend=backend, shape="fuzz", seqlens_q=sq, seqlens_k=sk, heads_q=hq, heads_kv=hkv, head_dim_qk=d,
        head_dim_v=dv, dtype=dtype, mask=draw(_made(masks, kinds=tuple(kinds_by[relation]))),
        direction=direction, softmax_scale=draw(_made(softmax_scales)), cache=cache,
        sinks=sinks, latent_kv=latent, kv_dtype="fp8" if kv_fp8 else None,
    )
