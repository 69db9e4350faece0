"""Keyword arguments matched against the installed library's signature: one implementation for every
adapter. Libraries rename and drop keywords between versions (FA3 has no ``dropout_p``; FlashInfer
renamed ``allow_fp16_qk_reduction`` to ``use_fp16_qk_reduction`` and ``data_type`` to
``q_data_type``), so an adapter says what it wants and this module says how the installed build
spells it -- or raises :class:`~pytest_attn.backends.base.Unsupported` when it cannot take it.
"""

from __future__ import annotations

import inspect
from collections.abc import Mapping
from typing import Any

from .base import Unsupported


def matched_kwargs(
    fn: Any,
    wanted: Mapping[str, Any],
    *,
    renames: Mapping[str, tuple[str, ...]] | None = None,
    droppable: Mapping[str, Any] | None = None,
    upgrade: str = "",
) -> dict[str, Any]:
    """``wanted`` under the names the installed ``fn`` takes (trying each name's older spellings in
    ``renames``). A keyword the build lacks under every spelling is dropped when ``droppable`` holds it
    with the same value (its default: passing it changes nothing) or with the value ``...`` (optional
    whatever its value); otherwise the case cannot run on this build, and ``upgrade`` says what to do.
    A function without a readable signature, or one taking ``**kwargs``, gets everything."""
    try:
        params = inspect.signature(fn).parameters
    except (TypeError, ValueError):  # a C extension without a signature
        return dict(wanted)
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return dict(wanted)
    renames = renames or {}
    droppable = droppable or {}
    out: dict[str, Any] = {}
    for name, value in wanted.items():
        spelled = next((n for n in (name, *renames.get(name, ())) if n in params), None)
        if spelled is not None:
            out[spelled] = value
        elif name in droppable and (droppable[name] is ... or droppable[name] == value):
            continue
        else:
            hint = f"; {upgrade}" if upgrade else ""
            raise Unsupported(f"{getattr(fn, '__qualname__', fn)} of this build takes no {name}= argument{hint}")
    return out
