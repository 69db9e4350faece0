"""Hints that say what to do, as the user can do it where they stand: a user's folder is not this checkout (no
``suites/``, no ``pip install -e .``), so a command a message names is built from the run's own command line
(``config.invocation_params``), never from this project's layout; and advice that depends on where a case came
from (a profile, ``--attn-case``) is given here, where that is known."""

from __future__ import annotations

import dataclasses
import shlex
from pathlib import Path

import pytest

from ..core import flops
from ..core.case import AttnCase
from ..engine.settings import CaseSkipped, TooLongHere
from ..verdicts.baseline import RERECORD

#: Flags of a run that a run recording its baseline must not repeat (each with its value where it takes one): the
#: recording adds its own, and a deliberate slowdown or another baseline has no place in it.
LEFT_OUT = ("--attn-save-baseline", "--attn-add-to-baseline", "--attn-force", "--attn-baseline",
            "--attn-inject-slowdown")
TAKES_VALUE = ("--attn-baseline", "--attn-inject-slowdown")


def rerecord_command(config: pytest.Config) -> str:
    """This run's command with ``--attn-save-baseline --attn-force`` in place of its baseline flags: the command
    that records the baseline of what this run measures (``--attn-force``: the one there is unusable)."""
    args = [str(a) for a in config.invocation_params.args]
    kept: list[str] = []
    skip_next = False
    for arg in args:
        if skip_next:
            skip_next = False
            continue
        flag = arg.split("=", 1)[0]
        if flag in LEFT_OUT:
            skip_next = arg in TAKES_VALUE  # "--attn-baseline PATH": its value is the next word
            continue
        kept.append(arg)
    return shlex.join(["pytest", *kept, "--attn-save-baseline", "--attn-force"])


def in_this_run(message: str, config: pytest.Config) -> str:
    """``message`` with the generic re-record hint replaced by the command that re-records from here."""
    return message.replace(RERECORD, f"re-record it: {rerecord_command(config)}")


def skip_reason(exc: CaseSkipped, case: AttnCase, adhoc: bool, profile: str, given: str = "--attn-case") -> str:
    """Why a case is skipped and what to do, where the run knows better than the engine: a case too long for
    this CPU came from ``--attn-case`` (give a smaller shape) or ``--attn-workload`` (replay it on a GPU), from
    the cpu profile (its shapes are the smallest: the CPU is busy), or from a GPU profile (``--attn-profile=cpu``)."""
    if not isinstance(exc, TooLongHere):
        return str(exc)
    if adhoc and given == "--attn-workload":
        return (f"{exc.what} This record of --attn-workload is too large for a CPU run: replay the workload on a GPU,"
                " or capture a smaller step (fewer or shorter prompts) for a CPU")
    if adhoc:
        return (f"{exc.what} The shape given with --attn-case is too large for a CPU run: give a smaller one (a call"
                f" of about {exc.fits_gflop:.2g} GFLOP fits here{_smaller(case, exc.fits_gflop)}), or run it on a GPU")
    if profile == "cpu":
        return (f"{exc.what} The cpu profile's shapes are its smallest, and this CPU runs them slower than a call may"
                " take (is it busy?): rerun when it is idle, or on a GPU")
    return f"{exc.what} On a CPU, use --attn-profile=cpu (tiny shapes); --attn-profile={profile} is for a GPU"


def _smaller(case: AttnCase, fits_gflop: float) -> str:
    """``: e.g. seqlen=N instead of M`` -- the longest power-of-two length of a uniform self-attention batch whose
    call fits ``fits_gflop`` -- or "" for any other shape."""
    lengths = set(case.seqlens_q) | set(case.seqlens_k)
    if len(lengths) != 1:
        return ""
    seqlen = length = lengths.pop()
    while length > 16:
        length //= 2
        shorter = dataclasses.replace(case, seqlens_q=(length,) * case.batch, seqlens_k=(length,) * case.batch)
        if flops.flops(shorter) / 1e9 <= fits_gflop:
            return f": e.g. seqlen={length} instead of {seqlen}"
    return ""


def not_loaded() -> str:
    """pytest-attn's code imported, its plugin not loaded: install the copy that was imported (there is no PyPI
    release: its own folder, where that is a source tree), or load the plugin by name."""
    root = Path(__file__).resolve().parents[2]
    where = str(root) if (root / "pyproject.toml").is_file() else "./pytest-attn, from the folder holding its clone"
    return ("pytest-attn is not loaded as a pytest plugin in this environment, though its code is imported (a"
            f" suite's conftest does): install it in this environment (pip install {where}), or load it by name:"
            " pytest -p pytest_attn.plugin ...")
