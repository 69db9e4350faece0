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

from ...core.percent import parse_percent
from .messages import HelloAnswer

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


def builds_lines(specs: tuple[ArmSpec, ArmSpec], abouts: tuple[HelloAnswer | None, HelloAnswer | None]) -> list[str]:
    """What the arms' hellos say they load, against each other: the libraries (and pytest-attn) whose
    version or folder differ; where the arms name two environments but load one build of everything
    listed, a warning -- the A/B would compare a build with itself. Empty before both arms said hello."""
    if not (abouts[0] and abouts[0].pytest_attn and abouts[1] and abouts[1].pytest_attn):
        return []
    seen = [_builds(abouts[0]), _builds(abouts[1])]
    differ = [f"{name} {seen[0].get(name, 'absent')} | {seen[1].get(name, 'absent')}"
              for name in sorted(seen[0].keys() | seen[1].keys()) if seen[0].get(name) != seen[1].get(name)]
    if differ:
        return ["A | B load different builds of: " + "; ".join(differ)]
    a, b = specs
    if (a.path, a.python) == (b.path, b.python):
        return []
    return [f"warning: A ({a.text}) and B ({b.text}) are two environments, but both load the same builds: "
            + "; ".join(f"{name} {build}" for name, build in sorted(seen[0].items()))
            + ". If B was to run another build of one of these, it does not reach B's worker: B's folder holds no"
            " install of it (pip install --target FOLDER ...), or B's Python finds another first (PYTHONPATH,"
            " which the arms inherit from this run, comes before a virtualenv's site-packages). The verdicts"
            " compare a build with itself unless the arms differ in code not listed here."]


def _builds(about: HelloAnswer) -> dict[str, str]:
    found = {name: f"{version} from {about.places.get(name, '?')}" for name, version in about.versions.items()}
    return {**found, "pytest-attn": f"from {about.pytest_attn}"}
