"""The back-end interface and the registry.

A back end answers three questions and builds one callable:

* ``available()``: can it run in this process at all (library importable)? None, or why not.
* ``supports(case, device)``: can it run this case? None, or the reason, which becomes the pytest
  skip reason word for word. Static knowledge only (dtypes, head dims, masks, layouts).
* ``prepare(case, inputs)``: returns a no-argument forward callable over ``inputs``. Anything done
  once (mask tensors, block masks, plans, compilation) happens here, outside the timed region.
  When the library itself refuses the case at call time, raise :class:`Unsupported` with its
  words; the case is skipped with them.

Optional attributes: ``forms`` (the forms of :data:`~pytest_attn.core.case.FORMS` it takes beyond plain
attention: ``"sinks"``, ``"fp8-kv"``; a case using another is refused for it, in :func:`case_refusal`'s
words, whatever its ``supports`` says -- so a back end written before a form existed is never run on it;
``"latent-kv"`` is taken by every back end, whose ``v`` input is then the key's first ``head_dim_v``
columns), ``distribution`` (the Python distribution whose code it measures, as pip names it:
"flash-attn", "my-kernels"; its installed version goes into baseline fingerprints and A/B reports; None or
absent for PyTorch's own calls, whose torch version is recorded anyway), ``only_suites`` (the suite kinds it
takes part in; all when absent),
``expression(case)`` (how it passes the mask, for the mask suite), ``empty_rows`` (what it writes for
a query that sees no key: "zero", "nan", or "any" when undocumented; the fuzzer checks it, and avoids
such rows for "any"), and, for a library that compiles kernels on first use, ``missing_modules(case,
inputs)``, ``build_modules(modules)`` and ``module_built(module)`` (:class:`CompilesOnFirstUse`): the
engine then builds every module a run needs, in parallel, before the first sample.

Library imports happen inside methods, never at module import.
"""

from __future__ import annotations

import contextlib
import re
import warnings
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..core.case import FORMS, AttnCase
from ..core.device import DeviceInfo
from ..core.layouts import LAYOUTS, Inputs

if TYPE_CHECKING:
    import torch

ForwardFn = Callable[[], "torch.Tensor"]


class Unsupported(Exception):
    """The back end cannot run this case; the message is the skip reason."""


@dataclass(frozen=True)
class JitModule:
    """A kernel module a library compiles on first use: its name, the library, where it is cached."""

    name: str
    library: str
    cache_dir: str
    handle: Any = field(default=None, compare=False, repr=False)  # the library's own object


@dataclass(frozen=True)
class QuietWarning:
    """One warning a library prints that is not the user's business, filtered in attention runs: the
    start of its message (a regular expression), its category and the module it is attributed to (the
    start of the dotted name, a regular expression; empty: any module)."""

    message: str
    category: type[Warning]
    module: str = ""

    def ini_line(self) -> str:
        """The ``filterwarnings`` ini line pytest takes for it."""
        return f"ignore:{self.message}:{self.category.__name__}:{self.module}"

    def install(self) -> None:
        """Filter it in this process (outside pytest)."""
        warnings.filterwarnings("ignore", message=self.message, category=self.category, module=self.module)


@runtime_checkable
class CompilesOnFirstUse(Protocol):
    """A back end whose library compiles kernel modules on first use (FlashInfer)."""

    def missing_modules(self, case: AttnCase, inputs: Inputs) -> list[JitModule]: ...

    def build_modules(self, modules: list[JitModule]) -> None: ...  # all at once, as parallel as the library can

    def module_built(self, module: JitModule) -> bool: ...

    def built_modules(self) -> set[str]: ...  # names of the built modules this process has asked for


@runtime_checkable
class Backend(Protocol):
    name: str
    description: str
    layout: str  # "bshd", "bhsd" or "thd"
    needs_cuda: bool
    has_backward: bool
    default_enabled: bool
    #: The distribution it measures (optional: a back end without it is read as None, see :func:`distribution_of`)
    distribution: str | None

    def available(self) -> str | None: ...

    def supports(self, case: AttnCase, device: DeviceInfo) -> str | None: ...

    def prepare(self, case: AttnCase, inputs: Inputs) -> ForwardFn: ...

    def workspace_bytes(self, case: AttnCase) -> int: ...


REQUIRED = ("name", "description", "layout", "needs_cuda", "has_backward", "default_enabled",
            "available", "supports", "prepare", "workspace_bytes")


class RegistryError(ValueError):
    pass


def canonical_distribution(name: str) -> str:
    """A distribution's name as pip compares it (PEP 503): ``flash_attn`` and ``Flash.Attn`` are ``flash-attn``."""
    return re.sub(r"[-_.]+", "-", name).lower()


def distribution_of(backend: Any) -> str | None:
    """The distribution ``backend`` measures, canonical (None: PyTorch's own, or not said)."""
    name = getattr(backend, "distribution", None)
    return canonical_distribution(name) if name else None


class Registry:
    """Back ends by name. Registering a name twice or an incomplete object is an error."""

    def __init__(self, backends: Iterable[Any] = ()) -> None:
        self._by_name: dict[str, Backend] = {}
        self._origins: dict[str, str] = {}  # name -> the file that registered it (a conftest), where known
        for backend in backends:
            self.register(backend)

    def origin(self, name: str) -> str | None:
        """The file whose ``pytest_attn_register_backends`` registered ``name`` (None: built in, or an
        entry point -- both found without it)."""
        return self._origins.get(name)

    def set_origin(self, name: str, path: str) -> None:
        self._origins[name] = path

    def wrapped(self, wrap: Callable[[Backend], Any]) -> Registry:
        """A registry of every back end wrapped (e.g. slowed on purpose), each keeping its name's origin."""
        out = Registry(wrap(b) for b in self)
        out._origins = dict(self._origins)
        return out

    def register(self, backend: Any) -> None:
        missing = [attr for attr in REQUIRED if not hasattr(backend, attr)]
        if missing:
            raise RegistryError(
                f"{backend!r} is not a pytest-attn back end: it lacks {', '.join(missing)} "
                "(see pytest_attn.backends.base.Backend)"
            )
        if not isinstance(backend.name, str) or not backend.name or any(c.isspace() for c in backend.name):
            raise RegistryError(f"{backend!r}: name={backend.name!r} must be a non-empty string without spaces")
        if backend.layout not in LAYOUTS:
            raise RegistryError(f"back end {backend.name!r}: layout={backend.layout!r} is not one of"
                                f" {', '.join(LAYOUTS)}")
        dist = getattr(backend, "distribution", None)
        if dist is not None and (not isinstance(dist, str) or not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9._-]*", dist)):
            raise RegistryError(f"back end {backend.name!r}: distribution={dist!r} is not a distribution's name; give"
                                " the name pip installs its package by (e.g. 'my-kernels'), or None")
        if backend.name in self._by_name:
            raise RegistryError(f"back end {backend.name!r} is registered twice")
        self._by_name[backend.name] = backend

    def get(self, name: str) -> Backend:
        try:
            return self._by_name[name]
        except KeyError:
            raise RegistryError(f"unknown back end {name!r}; known: {', '.join(self.names())}") from None

    def names(self) -> list[str]:
        return list(self._by_name)

    def distributions(self) -> list[str]:
        """The distributions its back ends measure, each once (canonical names, in registration order)."""
        return list(dict.fromkeys(d for d in map(distribution_of, self) if d))

    def default_names(self) -> list[str]:
        return [n for n, b in self._by_name.items() if b.default_enabled]

    def __iter__(self) -> Iterator[Backend]:
        return iter(self._by_name.values())


def unavailable(backend: Backend, device: DeviceInfo, direction: str = "fwd") -> str | None:
    """Why ``backend`` cannot run at all here, whatever the case (no GPU, library missing, no backward)."""
    if backend.needs_cuda and not device.is_cuda:
        return "no CUDA device"
    why = backend.available()
    if why:
        return why
    if direction == "fwd+bwd" and not backend.has_backward:
        return f"{backend.name} has no backward pass"
    return None


#: Each form of :data:`~pytest_attn.core.case.FORMS` in a refusal's words.
FORM_WORDS: dict[str, str] = {
    "sinks": "attention sinks (a learnable sink logit per query head in the softmax denominator)",
    "latent-kv": "absorbed MLA (values that are the key's first head_dim_v columns)",
    "fp8-kv": "fp8 (e4m3) KV cache with a per-tensor scale",
}
assert set(FORM_WORDS) == set(FORMS)
#: Forms every back end takes: its ``v`` input already holds what the form means.
FORMS_ALWAYS: tuple[str, ...] = ("latent-kv",)


def case_refusal(backend: Backend, case: AttnCase, device: DeviceInfo) -> str | None:
    """``backend.supports(case, device)``, then a form of the case the back end does not list in its ``forms``."""
    why = backend.supports(case, device)
    if why:
        return why
    taken = (*getattr(backend, "forms", ()), *FORMS_ALWAYS)
    missing = [f for f in case.forms if f not in taken]
    if missing:
        return (f"{backend.name} takes no {' and no '.join(FORM_WORDS[f] for f in missing)}: it does not list"
                f" {', '.join(repr(f) for f in missing)} in its forms")
    return None


def refusal(backend: Backend, case: AttnCase, device: DeviceInfo) -> str | None:
    """Why ``backend`` cannot run ``case`` on ``device``, or None: the one answer to "can this back end
    run here", for the benchmarks, the fuzzer and the ledger alike. Static knowledge only (no call)."""
    return unavailable(backend, device, case.direction) or case_refusal(backend, case, device)


def explain_refusal(messages: list[str]) -> list[str]:
    """Condense PyTorch's SDPA warnings into one line per kernel. PyTorch warns a header
    ("Flash attention kernel not used because:") and then one warning per reason; each ends in
    "(Triggered internally at ...)"."""
    sections: list[str] = []
    for raw in messages:
        text = raw.split("(Triggered internally at")[0].strip()
        if not text:
            continue
        if text.endswith("not used because:"):
            sections.append(text)
        elif sections and "not used because:" in sections[-1]:
            sections[-1] += (" " if sections[-1].endswith(":") else "; ") + text
        elif text not in sections:
            sections.append(text)
    return [s for s in sections if not s.endswith(":")]


@contextlib.contextmanager
def library_refusal(name: str, when: str = "", hint: str = "",
                    also: tuple[type[Exception], ...] = ()) -> Iterator[None]:
    """Turn the library's refusal raised inside the block into :class:`Unsupported` with its own words
    (and the warnings it gave, which is where PyTorch's SDPA says why a kernel was not used). A
    refusal is a RuntimeError, ValueError or NotImplementedError, or one of ``also`` for a library that
    checks its arguments otherwise (FA4 asserts them). Out-of-memory is not a refusal: it propagates and
    fails the case."""
    import torch

    refusals: tuple[type[Exception], ...] = (RuntimeError, ValueError, NotImplementedError, *also)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            yield
        except torch.cuda.OutOfMemoryError:
            raise
        except refusals as exc:
            why = explain_refusal([str(w.message) for w in caught])
            lines = [line.strip() for line in str(exc).splitlines() if line.strip()]
            first = lines[0] if lines else type(exc).__name__
            if first.endswith(":") and len(lines) > 1:  # a wrapper's header (torch.compile's "An exception occurred
                first += f" ... {lines[-1]}"  # in a subprocess:"): the error it wraps is its last line
            head = f"{name} refused this case{f' at {when}' if when else ''}: {first}"
            raise Unsupported("; ".join([head, *why, *([hint] if hint else [])])) from exc


def call_or_unsupported(name: str, fn: ForwardFn, also: tuple[type[Exception], ...] = ()) -> None:
    """Run ``fn`` once (a first call: compilation and autotuning happen here, never in a sample);
    a refusal becomes :class:`Unsupported` with the library's words (see :func:`library_refusal`)."""
    with library_refusal(name, also=also):
        fn()
