"""Back ends from outside the plugin: the ``pytest_attn_register_backends`` hook and the
``pytest_attn.backends`` entry-point group. Any problem is a start-up error naming its source. And what the
registered back ends measure: the installed version of each one's distribution (:func:`installed_versions`)."""

from __future__ import annotations

from collections.abc import Iterable
from importlib import metadata
from typing import Any

from .base import Registry, RegistryError

ENTRY_POINT_GROUP = "pytest_attn.backends"


def installed_versions(distributions: Iterable[str]) -> dict[str, str]:
    """Each of ``distributions`` (``Registry.distributions()``) installed here, with its version: what a
    fingerprint records of the libraries under test. One not installed is left out (its back ends skip)."""
    found = {}
    for name in distributions:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            continue
    return found


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
        entry_points = metadata.entry_points(group=ENTRY_POINT_GROUP)
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


def register_from_hooks(registry: Registry, hook_impls: Iterable[Any], config: Any) -> None:
    """Call each ``pytest_attn_register_backends`` implementation (pluggy's ``HookImpl``: ``plugin``,
    ``function``, ``argnames``) in turn, so each back end it registers is known by the file that did it
    (:meth:`Registry.origin`: a fuzz failure's replay command loads that file). Raises
    :class:`RegistryError` naming the file."""
    for impl in hook_impls:
        source = getattr(impl.plugin, "__file__", None) or repr(impl.plugin)
        before = set(registry.names())
        offered = {"registry": registry, "config": config}
        try:
            impl.function(**{name: offered[name] for name in impl.argnames if name in offered})
        except RegistryError as exc:
            raise RegistryError(f"{source}: {exc}") from None
        if getattr(impl.plugin, "__file__", None):
            _mark_origin(registry, before, impl.plugin.__file__)


def _mark_origin(registry: Registry, before: set[str], path: str) -> None:
    """The back ends registered since ``before`` came from the file ``path``."""
    for name in registry.names():
        if name not in before:
            registry.set_origin(name, path)


def register_from_file(registry: Registry, path: str) -> None:
    """Load a file that registers back ends (a ``conftest.py`` with ``pytest_attn_register_backends``)
    outside pytest -- the fuzz replay's ``--backends-from`` -- and call its hook (``config=None``). Its
    folder goes first on ``sys.path``, as pytest's rootdir-relative import would put it."""
    import importlib.util
    import sys
    from pathlib import Path

    file = Path(path).resolve()
    if not file.is_file():
        raise RegistryError(f"--backends-from {path}: no such file")
    sys.path.insert(0, str(file.parent))
    spec = importlib.util.spec_from_file_location(f"pytest_attn_replay_{file.stem}", file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    try:
        spec.loader.exec_module(module)
    except Exception as exc:
        raise RegistryError(f"--backends-from {path}: importing it failed: {type(exc).__name__}: {exc}") from None
    hook = getattr(module, "pytest_attn_register_backends", None)
    if hook is None:
        raise RegistryError(f"--backends-from {path}: it has no pytest_attn_register_backends(registry, config)")
    before = set(registry.names())
    hook(registry=registry, config=None)
    _mark_origin(registry, before, str(file))
