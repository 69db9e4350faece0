"""A back end's own code failing, in three lines: what failed (its ``prepare``, its forward call, or the backward
of that call's output), the exception and where in the back end's code it was raised, and what to do. The same
form for all three, so a broken backward reads like a broken forward -- not a traceback through pytest-attn and
autograd (20 lines, none of them the back end's). Pytest-free; imports no torch."""

from __future__ import annotations

import os
import sys
import traceback
from collections.abc import Callable
from pathlib import Path
from typing import TypeVar

from ..backends.base import Unsupported
from ..core.case import AttnCase
from .settings import CaseFailed, CaseSkipped

T = TypeVar("T")

#: What failed, and what to do, for each part of a case the back end's code runs.
ADVICE = {
    "prepare": "nothing was timed. Fix prepare(case, inputs), or have supports(case, device) return why the back end"
               " cannot run such a case (the case is then skipped with that reason)",
    "forward": "nothing was timed. Fix the call prepare() returns, or have supports(case, device) return why the back"
               " end cannot run such a case (the case is then skipped with that reason)",
    "backward": "the forward ran; nothing was timed (a fwd+bwd case times the forward and torch.autograd.grad of its"
                " output for dq, dk and dv). Fix the back end's backward, or declare has_backward = False to measure"
                " its forward only",
}
_PACKAGE = Path(__file__).resolve().parents[1]


def call_failure(case: AttnCase, part: str, exc: BaseException) -> str:
    """The three lines for ``exc`` raised by the back end's ``part`` ("prepare", "forward" or "backward")."""
    what = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    head = f"{case.id}: its {part} raised {type(exc).__name__}" + (f": {what}" if what else "")
    where = raised_at(exc)
    advice = ADVICE[part]
    if "out of memory" in str(exc).lower():
        advice = (f"the case needed more memory than the estimate ({case.describe()}); its memory was released and"
                  " the session goes on")
    return "\n".join([head, *([f"  raised at {where}"] if where else []), f"  {advice}"])


def no_graph(case: AttnCase) -> str:
    """A fwd+bwd case whose forward returned an output without an autograd graph: autograd's own words are
    "element 0 of tensors does not require grad", 20 lines into a traceback."""
    return (f"{case.id}: its backward cannot run: the output has no autograd graph back to q, k and v (computed"
            " without them, or detached)\n"
            "  a fwd+bwd case times the forward and torch.autograd.grad of its output for dq, dk and dv\n"
            "  make the call differentiable (your kernel and its backward in a torch.autograd.Function), or declare"
            " has_backward = False to measure its forward only")


def user_call(case: AttnCase, part: str, call: Callable[[], T]) -> T:
    """``call()``, the back end's ``part``; an exception of its own becomes :class:`CaseFailed` in the form of
    :func:`call_failure` (a skip, or a failure pytest-attn found, passes as it is)."""
    try:
        return call()
    except (CaseFailed, CaseSkipped, Unsupported):
        raise
    except Exception as exc:
        message = call_failure(case, part, exc)
    raise CaseFailed(message)  # outside the except: no "during handling of the above exception"


def raised_at(exc: BaseException) -> str:
    """Where ``exc`` was raised in the back end's code: the innermost frame outside pytest-attn and torch (and
    the one that called it), as ``file:line in function``; "" where every frame is theirs (torch's C++)."""
    torch = sys.modules.get("torch")
    theirs = [_PACKAGE] + ([Path(torch.__file__).parent] if torch is not None and torch.__file__ else [])
    skip = tuple(f"{folder}{os.sep}" for folder in theirs)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(skip)]
    if not frames:
        return ""
    shown = [f"{_shown(f.filename)}:{f.lineno} in {f.name}" for f in reversed(frames[-2:])]
    return shown[0] + (f" (called from {shown[1]})" if len(shown) > 1 else "")


def _shown(path: str) -> str:
    """``path`` relative to the working folder where it is inside it."""
    try:
        relative = os.path.relpath(path)
    except ValueError:  # another drive (Windows)
        return path
    return path if relative.startswith("..") else relative
