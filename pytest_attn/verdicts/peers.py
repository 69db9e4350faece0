"""Results of one problem against each other: each back end's time relative to the fastest that
ran the same problem (same shape, dtype, logical mask and direction). Pure.

In the mask suite the back ends of a group are different *expressions of one mask* (a causal flag,
a dense custom mask, packed bits, block-sparse tiles, ...), so the ratio reads "custom mask: N x
slower than causal=True for the same mask".
"""

from __future__ import annotations

from collections.abc import Sequence

from ..core.record import Peers, Record

#: How a back end's ``expression(case)`` text begins when the mask is held in memory as data (a
#: dense or packed mask, tiles, a block mask) rather than passed as a flag (``causal=True``,
#: ``window_size=...``, ``is_causal=True``, ``no mask``). Slow-path sentences are about data forms.
DATA_FORMS = ("custom_mask", "packed_custom_mask", "attn_mask", "block-sparse", "block mask")


DEFAULT_REFERENCE = "sdpa-math"


def is_data_form(expression: str) -> bool:
    return expression.startswith(DATA_FORMS)


def peers_of(results: Sequence[Record], reference: str = DEFAULT_REFERENCE) -> dict[str, Peers]:
    """By record name: each result against the fastest result of its group, and its speedup over the
    ``reference`` back end on the same problem (the naive math one by default) where that ran."""
    groups: dict[str, list[Record]] = {}
    for r in results:
        groups.setdefault(r.case.group, []).append(r)
    out: dict[str, Peers] = {}
    for members in groups.values():
        best = min(members, key=lambda r: r.median_s)
        ref = next((r for r in members if r.case.backend == reference), None)
        for r in members:
            speedup = ref.median_s / r.median_s if ref is not None else None
            out[r.name] = Peers(r.median_s / best.median_s, best.case.backend, best.expression, len(members),
                                speedup, reference)
    return out


def slow_path_lines(results: Sequence[Record], relative: dict[str, Peers], threshold: float = 1.5) -> list[str]:
    """One sentence per result that holds the mask as data (:data:`DATA_FORMS`) and is ``threshold``
    x slower or more than the fastest result of the same problem, which expressed it another way."""
    lines = []
    for r in sorted(results, key=lambda r: (r.case.group, r.median_s)):
        rel = relative.get(r.name)
        if rel is None or rel.results < 2 or rel.slowdown < threshold:
            continue
        if not is_data_form(r.expression) or r.expression == rel.fastest_expression:
            continue
        mine = f"{r.case.backend} ({r.expression})" if r.expression else r.case.backend
        best = f"{rel.fastest} ({rel.fastest_expression})" if rel.fastest_expression else rel.fastest
        lines.append(f"{r.case.group}: {mine}: {rel.slowdown:.2f}x slower than {best} for the same mask")
    return lines
