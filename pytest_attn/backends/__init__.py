"""Built-in back ends. Importing this package imports no kernel library and touches no GPU."""

from __future__ import annotations

from .base import Backend, Registry, RegistryError, Unsupported
from .flash_attn import FLASH_ATTN_BACKENDS, FlashAttnBackend
from .flashinfer import FLASHINFER_BACKENDS, FlashInferBackend
from .reference import ReferenceBackend
from .torch_flex import FlexBackend
from .torch_sdpa import SDPA_BACKENDS, SdpaBackend, SdpaLoopBackend
from .torch_varlen import VarlenBackend


def builtin_registry() -> Registry:
    """A fresh registry holding the built-in back ends (library ones skip where not installed)."""
    return Registry([*SDPA_BACKENDS, FlexBackend(), VarlenBackend(), SdpaLoopBackend(), *FLASH_ATTN_BACKENDS,
                     *FLASHINFER_BACKENDS, ReferenceBackend()])


__all__ = [
    "Backend",
    "FlashAttnBackend",
    "FlashInferBackend",
    "FlexBackend",
    "ReferenceBackend",
    "Registry",
    "RegistryError",
    "SdpaBackend",
    "SdpaLoopBackend",
    "Unsupported",
    "VarlenBackend",
    "builtin_registry",
]
