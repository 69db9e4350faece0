"""``with capture("model.workload.json"): model(...)``: the entry points patched while the block runs, each
call recorded after the library returned its output unchanged, everything restored on the way out (on an
exception too). Captures do not nest: a second one while one is active is refused."""

from __future__ import annotations

import functools
import importlib
import importlib.util
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from types import TracebackType
from typing import Any

from ..core.files import write_atomic
from ..core.workload import Call, Workload, dumps, workload_name
from . import fa_calls, fi_calls, sdpa_calls
from .mask_summary import MaskCache
from .recorder import Recorder
from .sites import ModuleStack
from .tensors import unreadable


class CaptureError(RuntimeError):
    pass


_ACTIVE: list[Capture] = []
_LOCK = threading.Lock()


def _importable(name: str) -> Any:
    """The module if it is imported or importable here (a library that fails to import is not patched)."""
    if name in sys.modules:
        return sys.modules[name]
    try:
        return importlib.import_module(name) if importlib.util.find_spec(name) is not None else None
    except Exception:  # an installed library that cannot load here (no GPU, a broken build): nothing to patch
        return None


class Capture:
    """Records the attention calls made inside ``with``; :attr:`workload` holds them afterwards, and ``path``
    (if given) receives them as a workload file when the block ends without an exception."""

    def __init__(self, path: str | Path | None = None, *, name: str | None = None, source: str = "") -> None:
        self.path = Path(path) if path is not None else None
        self.name = name or (workload_name(self.path) if self.path else "workload")
        self.source = source
        self.recorder = Recorder()
        self.workload: Workload | None = None
        self.patched: list[str] = []
        self._undo: list[tuple[Any, str, Any, bool]] = []
        self._sites = ModuleStack()
        self._planned: dict[int, Call] = {}
        self.masks = MaskCache()

    # ---- recording ------------------------------------------------------------------------------------
    def _note(self, api: str, read: Callable[[], Call]) -> None:
        try:
            call = read()
        except Exception as exc:  # never break the model: keep the call, say why it could not be read
            call = unreadable(api, f"capture could not read this call: {type(exc).__name__}: {exc}")
        self.recorder.add(call, self._sites.path())

    def _patch(self, owner: Any, attr: str, make: Callable[[Any], Any], label: str) -> None:
        present = attr in vars(owner)
        original = vars(owner)[attr] if present else getattr(owner, attr, None)
        if original is None:
            return
        self._undo.append((owner, attr, original, present))
        setattr(owner, attr, make(original))
        self.patched.append(label)

    def _function(self, api: str, describe: Callable[[tuple[Any, ...], dict[str, Any]], Call]) -> Any:
        def make(original: Any) -> Any:
            @functools.wraps(original)
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                out = original(*args, **kwargs)
                self._note(api, lambda: describe(args, kwargs))
                return out
            return wrapper
        return make

    def _bound(self, api: str, read: Callable[[str, dict[str, Any]], Call]) -> Any:
        def make(original: Any) -> Any:
            return self._function(api, lambda a, k: read(api, fa_calls.bind(original, a, k)))(original)
        return make

    # ---- the entry points -----------------------------------------------------------------------------
    def _install(self) -> None:
        import torch.nn.functional as F

        self._patch(F, "scaled_dot_product_attention",
                    self._function("sdpa", lambda a, k: sdpa_calls.describe(a, k, self.masks)),
                    "torch.nn.functional.scaled_dot_product_attention")
        for module_name, prefix in fa_calls.MODULES.items():
            module = _importable(module_name)
            for api, read in fa_calls.DESCRIBE.items():
                if module is not None and hasattr(module, api):
                    self._patch(module, api, self._bound(prefix + api, read), f"{module_name}.{api}")
        fi = _importable("flashinfer")
        if fi is not None:
            for api, read in fi_calls.FUNCTIONS.items():
                self._patch(fi, api, self._bound(api, read), f"flashinfer.{api}")
            for cls_name in fi_calls.WRAPPERS:
                cls = getattr(fi, cls_name, None)
                if cls is not None and hasattr(cls, "plan") and hasattr(cls, "run"):
                    self._patch(cls, "plan", self._plan(cls_name), f"flashinfer.{cls_name}.plan")
                    self._patch(cls, "run", self._run(cls_name), f"flashinfer.{cls_name}.run")

    def _plan(self, api: str) -> Any:
        def make(original: Any) -> Any:
            @functools.wraps(original)
            def plan(wrapper: Any, *args: Any, **kwargs: Any) -> Any:
                out = original(wrapper, *args, **kwargs)
                try:
                    bound = fa_calls.bind(original, (wrapper, *args), kwargs)
                    self._planned[id(wrapper)] = fi_calls.describe_plan(api, bound)
                except Exception as exc:
                    self._planned[id(wrapper)] = unreadable(api, f"capture could not read plan(): {exc}")
                return out
            return plan
        return make

    def _run(self, api: str) -> Any:
        def make(original: Any) -> Any:
            @functools.wraps(original)
            def run(wrapper: Any, *args: Any, **kwargs: Any) -> Any:
                out = original(wrapper, *args, **kwargs)
                planned = self._planned.get(id(wrapper)) or unreadable(api, "run() of a wrapper whose plan() ran"
                                                                            " before the capture started")
                self._note(api, lambda: planned)
                return out
            return run
        return make

    # ---- the block ------------------------------------------------------------------------------------
    def __enter__(self) -> Capture:
        with _LOCK:
            if _ACTIVE:
                other = _ACTIVE[0].path or "in memory"
                raise CaptureError(f"a capture is already active ({other}); captures do not nest: end that one"
                                   " first, or capture the whole run once")
            _ACTIVE.append(self)
        try:
            self._install()
            self._sites.install()
        except BaseException:
            self._restore()
            raise
        return self

    def _restore(self) -> None:
        try:
            self._sites.remove()
            for owner, attr, original, present in reversed(self._undo):
                if present:
                    setattr(owner, attr, original)
                else:  # it was inherited: take ours away
                    delattr(owner, attr)
            self._undo.clear()
            self._planned.clear()
        finally:
            with _LOCK:
                _ACTIVE.clear()

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self._restore()
        self.workload = self.recorder.workload(self.name, self.source)
        if kind is None and self.path is not None:
            write_atomic(self.path, dumps(self.workload))


def capture(path: str | Path | None = None, *, name: str | None = None, source: str = "") -> Capture:
    """Record the attention calls of a block: ``with pytest_attn.capture("llama.workload.json"): model(x)``."""
    return Capture(path, name=name, source=source)
