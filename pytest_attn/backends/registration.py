"""Back ends from outside the plugin: the ``pytest_attn_register_backends`` hook and the
``pytest_attn.backends`` entry-point group. Any problem is a start-up error naming its source."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .base import Registry, RegistryError

ENTRY_POINT_GROUP = "pytest_attn.backends"


def _backends_of(obj: Any) -> list[Any]:
    """An entry point's object: a back end, a class to instantiate, or a function returning some."""
    if isinstance(obj, type):
        return [obj()]
    if callable(obj) and not hasattr(obj, "prepare"):
        made = obj()
        return list(made) if isinstance(made, Iterable) else [made]
    return [obj]


def register_entry_points(registry: Registry, entry_points: Iterable[Any] | None = None) -> list[str]:
    """Register the back ends of every installed ``pytest_attn.backends`` entry point; returns
    their sources. Raises :class:`RegistryError` naming the entry point that failed."""
    if entry_points is None:
        from importlib.metadata import entry_points as all_entry_points

        entry_points = all_entry_points(group=ENTRY_POINT_GROUP)
    sources = []
    for ep in entry_points:
        source = f"entry point {ep.name!r} ({ep.value}) of group {ENTRY_POINT_GROUP}"
        try:
            objects = _backends_of(ep.load())
        except Exception as exc:
            raise RegistryError(f"{source} failed to load: {type(exc).__name__}: {exc}") from None
        for obj in objects:
            try:
                registry.register(obj)
            except RegistryError as exc:
                raise RegistryError(f"{source}: {exc}") from None
        sources.append(source)
    return sources
