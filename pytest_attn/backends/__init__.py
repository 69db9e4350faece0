"""Adapters: one per library entry point, each a small class behind one interface.

:mod:`.base` defines the interface (``available``, ``supports`` -- whose reason is the skip reason word
for word -- ``prepare``, ``workspace_bytes``), the :class:`~.base.Registry` and :func:`~.base.refusal`,
the one answer to "can this back end run here". PyTorch (SDPA per kernel, flex, varlen), flash-attn
(FA2/3/4 entry points) and FlashInfer (single, ragged, paged, decode, block-sparse) each have a module;
:mod:`.registration` adds back ends from entry points, :mod:`.signature` matches keywords to the
installed library. Adapters import their library inside methods only, and import nothing above the
core and the oracle. A new back end goes here (or in your own package, registered by entry point).

Modules: :mod:`.base` (the interface, the registry), :mod:`.torch_sdpa`, :mod:`.torch_flex`,
:mod:`.torch_varlen`, :mod:`.torch_padded` (PyTorch), :mod:`.flash_attn` (FA2, FA3, FA4), :mod:`.fa3` (which FA3
build, and what it leaves out), :mod:`.flashinfer`,
:mod:`.flashinfer_paged`, :mod:`.flashinfer_mla` and :mod:`.flashinfer_jit` (FlashInfer, its paged calls, its
absorbed-MLA decode and its JIT step),
:mod:`.kvcache` (KV caches as serving engines hold them), :mod:`.upcast` (the oracle's math as a back end),
:mod:`.registration`, :mod:`.signature`.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from .base import Backend, QuietWarning, Registry, RegistryError, Unsupported, refusal
from .flash_attn import FA4_QUIET, FLASH_ATTN_BACKENDS
from .flashinfer import PREFILL_BACKENDS
from .flashinfer_mla import MLA_BACKENDS
from .flashinfer_paged import PAGED_BACKENDS
from .registration import installed_versions, register_entry_points, register_from_file, register_from_hooks
from .torch_flex import FlexBackend
from .torch_padded import SdpaPaddedBackend
from .torch_sdpa import SDPA_BACKENDS, SdpaBackend, SdpaLoopBackend
from .torch_varlen import VarlenBackend
from .upcast import ReferenceBackend

#: Regular expressions of library warnings that are not the user's business (UserWarnings, matched from the
#: message's start): attention runs filter them, and nothing else.
QUIET_WARNINGS: tuple[QuietWarning, ...] = (
    *FA4_QUIET,
    # torch 2.11 deprecates torch.jit.script_method, and scripting a module warns once per method it
    # compiles: 14 lines in every smoke run on an H200, from torch's own code (attributed to torch.jit)
    QuietWarning(r"`torch\.jit\.script_method` is deprecated", DeprecationWarning, r"torch\.jit"),
)


def builtin_registry() -> Registry:
    """A fresh registry holding the built-in back ends (library ones skip where not installed)."""
    return Registry([*SDPA_BACKENDS, FlexBackend(), VarlenBackend(), SdpaLoopBackend(), SdpaPaddedBackend(),
                     *FLASH_ATTN_BACKENDS,
                     *PREFILL_BACKENDS[:2], *PAGED_BACKENDS, *MLA_BACKENDS, *PREFILL_BACKENDS[2:],
                     ReferenceBackend()])


def assemble_registry(*, hook_impls: Iterable[Any] = (), config: Any = None, files: Iterable[str] = ()) -> Registry:
    """The one way a registry is built, in every process: the built-in back ends, the installed entry points
    (``pytest_attn.backends``), then a pytest session's ``pytest_attn_register_backends`` hooks (``hook_impls``,
    in the order pluggy calls them) or, in a process without pytest -- an A/B arm, a fuzz replay, the ncu side
    of ``--attn-hbm`` -- the files that hold them (``files``: each a conftest.py, as :meth:`Registry.origin`
    names it). Raises :class:`RegistryError` naming the source that failed."""
    registry = builtin_registry()
    register_entry_points(registry)
    register_from_hooks(registry, hook_impls, config)
    for path in files:
        register_from_file(registry, path)
    return registry


__all__ = [
    "QUIET_WARNINGS",
    "Backend",
    "QuietWarning",
    "Registry",
    "RegistryError",
    "SdpaBackend",
    "Unsupported",
    "assemble_registry",
    "builtin_registry",
    "installed_versions",
    "refusal",
]
