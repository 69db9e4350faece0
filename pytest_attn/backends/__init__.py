"""Built-in back ends. Importing this package imports no kernel library and touches no GPU."""

from __future__ import annotations

from .base import Backend, Registry, RegistryError, Unsupported
from .reference import ReferenceBackend
from .torch_flex import FlexBackend
from .torch_sdpa import SDPA_BACKENDS, SdpaBackend
from .torch_varlen import VarlenBackend


def builtin_registry() -> Registry:
    """A fresh registry holding the built-in back ends."""
    return Registry([*SDPA_BACKENDS, FlexBackend(), VarlenBackend(), ReferenceBackend()])


__all__ = [
    "Backend",
    "FlexBackend",
    "ReferenceBackend",
    "Registry",
    "RegistryError",
    "SdpaBackend",
    "Unsupported",
    "VarlenBackend",
    "builtin_registry",
]
