"""Masks: builders for the masks users write, and the one dense form every back end converts from.

Builders return a :class:`~pytest_attn.core.case.Mask`:

* :func:`causal` -- bottom-right (flash-attn / FlashInfer; query ``i`` sees ``j <= i + sk - sq``) or
  top-left (PyTorch SDPA's ``is_causal``: ``j <= i``); the two agree only when ``sq == sk``;
* :func:`sliding_window` -- flash-attn's ``window_size=(left, right)``, bottom-right aligned;
* :func:`document` -- block-diagonal over documents packed into one sequence (optionally causal
  within each);
* :func:`prefix_lm` -- every query sees the prefix, and causally after it;
* :func:`random_block_sparse` -- whole ``block x block`` tiles kept at random (seeded);
* :func:`all_true` -- the dense all-True mask users pass when they mean "no mask".

Custom builders give their mask by rows, so a few rows of a 111,856-token mask cost kilobytes. The
converters to each library's format are in :mod:`pytest_attn.core.mask_formats`, the device-side
twins (a torch bool mask, packed on the device) in :mod:`pytest_attn.core.mask_tensors`.
Visible-pair counts for the FLOP model are in :mod:`pytest_attn.core.flops` (checked against
:func:`dense_mask_np`). Pure NumPy.
"""

from __future__ import annotations

import zlib
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from .case import AttnCase, CaseError, Mask
from .flops import visible_pairs

if TYPE_CHECKING:
    import numpy as np

ALIGNMENTS = ("bottom-right", "top-left")


# ---- builders -----------------------------------------------------------------------------------
def causal(alignment: str = "bottom-right") -> Mask:
    """Causal mask; ``alignment`` says which corner the diagonal starts from when sq != sk."""
    import numpy as np
    if alignment == "bottom-right":
        return Mask.causal()
    if alignment == "top-left":
        def rows(sq: int, sk: int, r: np.ndarray) -> np.ndarray:
            return np.arange(sk)[None, :] <= r[:, None]

        return Mask.custom("causal-topleft", rows_fn=rows)
    raise CaseError(f"alignment={alignment!r} is not one of {', '.join(ALIGNMENTS)}")


def sliding_window(left: int, right: int = 0) -> Mask:
    """Query ``i`` sees keys ``[i + sk - sq - left, i + sk - sq + right]``; -1 = unbounded."""
    return Mask.window(left, right)


def _short_id(prefix: str, values: Sequence[int]) -> str:
    text = "-".join(map(str, values))
    return f"{prefix}{text}" if len(values) <= 4 else f"{prefix}{len(values)}x{zlib.crc32(text.encode()):08x}"


def document(lengths: Sequence[int], *, causal: bool = False) -> Mask:
    """Block-diagonal mask over documents of ``lengths`` packed into one sequence of ``sum(lengths)``
    tokens (queries and keys): a token sees only its own document (and only earlier tokens of it
    when ``causal``)."""
    import numpy as np
    lengths = tuple(int(n) for n in lengths)
    if not lengths or any(n <= 0 for n in lengths):
        raise CaseError(f"document lengths {lengths!r} must be one or more positive ints")
    starts = np.repeat(np.cumsum((0, *lengths[:-1])), lengths)  # document start of every token
    ends = np.repeat(np.cumsum(lengths), lengths)
    total = int(sum(lengths))

    def rows(sq: int, sk: int, r: np.ndarray) -> np.ndarray:
        if sq != total or sk != total:
            raise CaseError(f"document mask over {total} tokens applied to seqlen_q={sq}, seqlen_k={sk}")
        j = np.arange(sk)[None, :]
        seen = (j >= starts[r][:, None]) & (j < ends[r][:, None])
        return seen & (j <= r[:, None]) if causal else seen

    return Mask.custom(_short_id("doccausal" if causal else "doc", lengths), rows_fn=rows)


def prefix_lm(prefix: int) -> Mask:
    """Prefix-LM: every query sees the first ``prefix`` keys, and keys up to its own position
    (bottom-right aligned) after that."""
    import numpy as np
    if prefix < 0:
        raise CaseError(f"prefix={prefix} must be >= 0")

    def rows(sq: int, sk: int, r: np.ndarray) -> np.ndarray:
        j = np.arange(sk)[None, :]
        return (j < prefix) | (j <= r[:, None] + (sk - sq))

    return Mask.custom(f"prefixlm{prefix}", rows_fn=rows)


def random_block_sparse(block: int = 128, density: float = 0.25, seed: int = 0) -> Mask:
    """Whole ``block x block`` tiles, each kept with probability ``density`` (seeded); every row of
    tiles keeps its diagonal tile, so no query is left without keys."""
    import numpy as np
    if block <= 0:
        raise CaseError(f"block={block} must be positive")
    if not 0 < density <= 1:
        raise CaseError(f"density={density} must be in (0, 1]")

    def tiles(sq: int, sk: int) -> np.ndarray:
        nq, nk = -(-sq // block), -(-sk // block)
        keep = np.random.default_rng(seed).random((nq, nk)) < density
        keep[np.arange(nq), np.minimum(np.arange(nq) * nk // nq, nk - 1)] = True
        return keep

    def rows(sq: int, sk: int, r: np.ndarray) -> np.ndarray:
        keep = tiles(sq, sk)
        return np.repeat(keep[r // block], block, axis=1)[:, :sk]

    return Mask.custom(f"blocksparse{block}-d{round(density * 100)}-s{seed}", rows_fn=rows)


def all_true() -> Mask:
    """The dense all-True mask: hides nothing, but a library given it as a custom mask still reads it."""
    import numpy as np

    def rows(sq: int, sk: int, r: np.ndarray) -> np.ndarray:
        return np.ones((len(r), sk), dtype=bool)

    return Mask.custom("all-true", rows_fn=rows)


# ---- the dense form ----------------------------------------------------------------------------
def window_rows(i: Any, j: Any, offset: int, left: int, right: int) -> Any:
    """The bottom-right window rule on index arrays of numpy or torch (operators only)."""
    diag = i[:, None] + offset
    visible = (j[None, :] >= 0) & (i[:, None] >= 0)
    if left >= 0:
        visible = visible & (j[None, :] >= diag - left)
    if right >= 0:
        visible = visible & (j[None, :] <= diag + right)
    return visible


def dense_mask_np(mask: Mask, seqlen_q: int, seqlen_k: int, rows: np.ndarray | None = None) -> np.ndarray:
    """Boolean ``(seqlen_q, seqlen_k)`` array, True where query i may see key j; only the query
    ``rows`` when given."""
    import numpy as np
    i = np.arange(seqlen_q) if rows is None else np.asarray(rows)
    if mask.kind == "custom":
        return mask.rows(seqlen_q, seqlen_k, i)
    if mask.kind == "none":
        return np.ones((i.shape[0], seqlen_k), dtype=bool)
    return np.asarray(window_rows(i, np.arange(seqlen_k), seqlen_k - seqlen_q, mask.window_left,
                                   mask.window_right))


def is_full(case: AttnCase) -> bool:
    """True when the mask hides nothing on this case (e.g. causal decode with one query, or an
    all-True custom mask)."""
    if case.mask.kind == "none":
        return True
    return all(
        visible_pairs(sq, sk, case.mask) == sq * sk for sq, sk in zip(case.seqlens_q, case.seqlens_k, strict=True)
    )


def effective_mask(case: AttnCase) -> Mask:
    """The case's mask, or ``Mask.none()`` when it hides nothing: back ends then skip mask work."""
    return Mask.none() if is_full(case) else case.mask


def flag_form(case: AttnCase) -> tuple[int, int] | None:
    """The case's mask as flash-attn-style ``(window_left, window_right)`` flags -- ``(-1, -1)`` for
    no mask, ``(-1, 0)`` for bottom-right causal -- or None when only a custom mask can say it."""
    mask = effective_mask(case)
    if mask.kind == "none":
        return (-1, -1)
    if mask.kind in ("causal", "window"):
        return (mask.window_left, mask.window_right)
    return None
