"""``--attn-ab=ARM_A,ARM_B``: what each arm of a paired A/B run is. Pure but for checking paths.

An arm is where its worker process gets its libraries, then ``+`` modifiers:

* ``same``: this environment as it is (the A/A of a proof, or an arm that differs by a modifier only);
* a directory: put first on ``PYTHONPATH`` -- a checkout of the library, or a ``pip install --target``
  prefix of its build (``pip install --target /tmp/main-build flash-attn==...``);
* a Python executable (a file, e.g. ``../main/.venv/bin/python``): that interpreter and its site-packages;
* ``+slowdown=2%``: the arm's back ends are made this much slower on purpose (``--attn-inject-slowdown``'s
  calibrated matmuls): how a paired run proves it sees a change of that size;
* ``+backend=NAME``: the arm runs back end NAME on each selected problem in place of the case's own
  (two registered back ends, one against the other).

Examples: ``same,same`` (A/A), ``same,same+slowdown=2%``, ``/tmp/main-site,.``,
``../main/.venv/bin/python,.venv/bin/python``, ``same,same+backend=fa4``.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from ..core.percent import parse_percent

EXAMPLES = "same,same+slowdown=2%  |  /tmp/main-site,.  |  ../main/.venv/bin/python,.venv/bin/python"


@dataclass(frozen=True)
class ArmSpec:
    text: str  # as given
    python: str | None = None  # an interpreter; None: the controller's own
    path: str | None = None  # put first on PYTHONPATH (absolute)
    slowdown: float | None = None
    backend: str | None = None

    def describe(self) -> str:
        where = (f"python {self.python}" if self.python else f"PYTHONPATH={self.path}:..." if self.path
                 else "this environment")
        extra = [f"slowed by {self.slowdown:.1%} on purpose" if self.slowdown else "",
                 f"back end {self.backend} in place of each case's" if self.backend else ""]
        return "; ".join([where, *filter(None, extra)])


def parse_arm(text: str, cwd: Path) -> ArmSpec:
    """One arm; ValueError says what is wrong and what would do."""
    base, *mods = [part.strip() for part in text.split("+")]
    if not base:
        raise ValueError(f"arm {text!r} names no environment: start it with same, a folder or a python")
    fields: dict[str, object] = {"text": text.strip()}
    if base != "same":
        where = (cwd / base).resolve() if not Path(base).is_absolute() else Path(base)
        if where.is_dir():
            fields["path"] = str(where)
        elif where.is_file() and os.access(where, os.X_OK):
            fields["python"] = str(Path(cwd / base).absolute() if not Path(base).is_absolute() else base)
        else:
            raise ValueError(f"arm {text!r}: {base} is neither a folder (put first on PYTHONPATH) nor an executable"
                             " Python; give one, or 'same' for this environment")
    for mod in mods:
        key, _, value = mod.partition("=")
        if key == "slowdown" and value:
            fields["slowdown"] = parse_percent(value, f"arm {text!r}: slowdown", upper=10.0)
        elif key == "backend" and value:
            fields["backend"] = value
        else:
            raise ValueError(f"arm {text!r}: unknown modifier {mod!r}; an arm takes +slowdown=PCT and"
                             " +backend=NAME")
    return ArmSpec(**fields)  # type: ignore[arg-type]


def parse_ab(text: str, cwd: Path) -> tuple[ArmSpec, ArmSpec]:
    """``ARM_A,ARM_B``: exactly two arms."""
    parts = text.split(",")
    if len(parts) != 2:
        raise ValueError(f"--attn-ab={text!r}: give two arms separated by a comma, A (the reference, e.g. main)"
                         f" then B (the change), e.g. {EXAMPLES}")
    return parse_arm(parts[0], cwd), parse_arm(parts[1], cwd)
