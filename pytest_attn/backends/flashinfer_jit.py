"""FlashInfer's JIT, made a step of its own: which modules a case needs that are not built yet, and
building one.

FlashInfer compiles each kernel module on first use (30-100 s with ``nvcc``) inside the first call.
With ``FLASHINFER_DISABLE_JIT`` set, that first call raises ``MissingJITCacheError`` carrying the
module's ``JitSpec`` instead of compiling it: :func:`missing_modules` runs a case's ``prepare`` that
way and collects them; :func:`build_modules` builds them all in one ninja run, under FlashInfer's own
file locks, so processes sharing a cache never build a module twice. The engine's compile phase
(:mod:`pytest_attn.engine.compile`) builds every missing module of a session in parallel before any
sample.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator
from typing import Any

from ..core.case import AttnCase
from ..core.layouts import Inputs
from .base import JitModule, Unsupported

DISABLE = "FLASHINFER_DISABLE_JIT"


@contextlib.contextmanager
def jit_disabled() -> Iterator[None]:
    before = os.environ.get(DISABLE)
    os.environ[DISABLE] = "1"
    try:
        yield
    finally:
        if before is None:
            del os.environ[DISABLE]
        else:
            os.environ[DISABLE] = before


def _missing_spec(exc: BaseException) -> Any:
    """The ``JitSpec`` a ``MissingJITCacheError`` somewhere in ``exc``'s chain names, or None."""
    seen: BaseException | None = exc
    while seen is not None:
        spec = getattr(seen, "spec", None)
        if type(seen).__name__ == "MissingJITCacheError" and spec is not None:
            return spec
        seen = seen.__cause__ or seen.__context__
    return None


def missing_modules(prepare: Callable[[AttnCase, Inputs], Any], case: AttnCase, inputs: Inputs) -> list[JitModule]:
    """The first module ``prepare(case, inputs)`` needs, when it is not built yet; [] when it is built,
    or when the case is refused for another reason (its own prepare says why later).

    With JIT disabled FlashInfer 0.7 raises for every module that is not an AOT artifact, built or not
    (its ``try_load`` trusts only AOT files), so this sees a call's first module only: the compile
    phase then makes each call once with JIT on, which loads what was built and compiles what is left."""
    from flashinfer.jit import env

    with jit_disabled():
        try:
            prepare(case, inputs)
        except (Unsupported, RuntimeError) as exc:
            spec = _missing_spec(exc)
            if spec is None and not isinstance(exc, Unsupported):
                raise
            if spec is None or spec.is_compiled:
                return []
            return [JitModule(spec.name, "FlashInfer", str(env.FLASHINFER_JIT_DIR), spec)]
    return []


def build_modules(modules: list[JitModule]) -> None:
    """Build ``modules`` in one ninja run (FlashInfer's ``build_jit_specs``): every translation unit of
    every module shares the machine's cores, so the whole build takes about as long as its slowest
    file. Raises with ninja's output when the compiler fails."""
    from flashinfer.jit import build_jit_specs

    build_jit_specs([m.handle for m in modules], verbose=False)


def module_built(module: JitModule) -> bool:
    return bool(module.handle.is_compiled)


def built_modules() -> set[str]:
    """The modules this process has asked for that are built (FlashInfer's public spec registry)."""
    from flashinfer.jit import jit_spec_registry

    return {status.name for status in jit_spec_registry.get_all_statuses() if status.is_compiled}
