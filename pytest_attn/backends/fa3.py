"""FlashAttention-3 as it is shipped: the upstream build (``flash_attn_interface`` with ``flash_attn_config``,
from flash-attention's ``hopper/``) or the forward-only wheel ``fa3-fwd`` (``fa3_fwd_interface`` with
``fa3_fwd_config``), and what a build leaves out, read from its own ``CONFIG["build_flags"]``.

``fa3-fwd`` 0.0.3 renamed its modules but its interface still imports ``flash_attn_config``; the alias
``sys.modules["flash_attn_config"] = fa3_fwd_config`` is set here, before its import, and nowhere else. Its
config disables the backward, local (window) attention, paged KV and fp16: the backward, windows and fp16 are
skip reasons naming the flag (the adapter is :mod:`.flash_attn`'s ``fa3`` and ``fa3-varlen``, which take no
paged cache). Library imports inside functions only.
"""

from __future__ import annotations

import importlib
import sys
from typing import Any

from ..core.case import AttnCase
from ..core.masks import flag_form

UPSTREAM, UPSTREAM_CONFIG = "flash_attn_interface", "flash_attn_config"
FWD_WHEEL, FWD_WHEEL_CONFIG = "fa3_fwd_interface", "fa3_fwd_config"
#: Head-dim buckets a build may leave out, smallest first (``round_up_headdim`` in the interface).
HDIM_FLAGS: tuple[tuple[int, str], ...] = tuple((d, f"FLASHATTENTION_DISABLE_HDIM{d}") for d in (64, 96, 128, 192, 256))
#: The unequal (head_dim_qk, head_dim_v) FA3 compiles, and the flag that leaves each out.
HDIM_PAIRS: dict[tuple[int, int], str] = {(192, 128): "FLASH_ATTENTION_DISABLE_HDIMDIFF192"}


def import_interface() -> Any:
    """The FA3 interface module: upstream's, else the forward-only wheel's (its config aliased first).
    Raises the upstream's ModuleNotFoundError when neither is installed."""
    try:
        return importlib.import_module(UPSTREAM)
    except ModuleNotFoundError as exc:
        if exc.name != UPSTREAM:
            raise  # upstream is there but something it needs is not: say that, do not hide it
        try:
            config = importlib.import_module(FWD_WHEEL_CONFIG)
        except ModuleNotFoundError:
            raise exc from None
        if sys.modules.get(UPSTREAM_CONFIG) is None:  # the wheel's packaging slip: see the module docstring
            sys.modules[UPSTREAM_CONFIG] = config
        return importlib.import_module(FWD_WHEEL)


def config() -> tuple[str, dict[str, bool]]:
    """(the config module's name, its build flags) of the FA3 build that is installed; ("", {}) when none
    says (an older build without a config module: nothing is refused on its account)."""
    for name in (UPSTREAM_CONFIG, FWD_WHEEL_CONFIG):  # the upstream's, or the wheel's (aliased or not yet)
        try:
            module = importlib.import_module(name)
        except ImportError:
            continue
        flags = getattr(module, "CONFIG", {}).get("build_flags", {})
        return getattr(module, "__name__", name), {k: bool(v) for k, v in flags.items()}
    return "", {}


def distribution() -> str:
    """What pip calls the installed FA3: ``fa3-fwd`` where only the forward wheel is there, else ``flash-attn-3``."""
    from importlib import metadata

    def installed(dist: str) -> bool:
        try:
            metadata.version(dist)
        except metadata.PackageNotFoundError:
            return False
        return True

    return "fa3-fwd" if installed("fa3-fwd") and not installed("flash-attn-3") else "flash-attn-3"


def build_refusal(case: AttnCase, varlen: bool) -> str | None:
    """What the installed FA3 build leaves out that ``case`` needs, naming the config flag; None when it can."""
    name, flags = config()

    def off(flag: str, what: str) -> str | None:
        return f"this FA3 build has no {what} ({name}.CONFIG sets {flag})" if flags.get(flag) else None

    checks = [
        case.direction == "fwd+bwd" and off("FLASHATTENTION_DISABLE_BACKWARD", "backward: it is forward only"),
        flag_form(case) not in (None, (-1, -1), (-1, 0)) and off("FLASHATTENTION_DISABLE_LOCAL",
                                                                   "sliding window (local attention)"),
        case.dtype == "fp16" and off("FLASHATTENTION_DISABLE_FP16", "fp16 kernels"),
        case.dtype == "fp8" and off("FLASHATTENTION_DISABLE_FP8", "fp8 kernels"),
        varlen and off("FLASHATTENTION_DISABLE_VARLEN", "varlen kernels"),
    ]
    why = next((c for c in checks if c), None)
    return why or _head_dims(case, name, flags)


def _head_dims(case: AttnCase, name: str, flags: dict[str, bool]) -> str | None:
    pair = (case.head_dim_qk, case.head_dim_v)
    if pair[0] != pair[1]:
        flag = HDIM_PAIRS.get(pair)
        if flag is None:
            return (f"FA3 takes head_dim_v != head_dim_qk only as {', '.join(map(str, HDIM_PAIRS))}; got"
                    f" {pair}")
        if flags.get(flag):
            return f"this FA3 build has no {pair} kernels ({name}.CONFIG sets {flag})"
    built = [d for d, flag in HDIM_FLAGS if not flags.get(flag)]
    if flags and not any(d >= max(pair) for d in built):
        return (f"this FA3 build has no kernel for head dim {max(pair)}: its {name}.CONFIG leaves only"
                f" {', '.join(map(str, built)) or 'none'}")
    return None
