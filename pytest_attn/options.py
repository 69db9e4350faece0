"""Command-line options: converters (raise ``ArgumentTypeError`` so bad flags fail at start-up) and
the resolved, validated :class:`AttnOptions`. Pure: no torch."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from dataclasses import dataclass
from typing import TypeVar

from .case import DIRECTIONS, DTYPES
from .catalog import PROFILES, Variant
from .clocks import LockRequest, parse_lock
from .stopping import TIMER_KINDS, StopRule

# Per-case sampling time cap by profile (seconds); --attn-max-time overrides it.
DEFAULT_MAX_TIME_S = {"smoke": 2.0, "default": 3.0, "full": 5.0, "cpu": 0.5}


def comma_list(choices: tuple[str, ...], what: str) -> Callable[[str], tuple[str, ...]]:
    """Converter for ``a,b,c`` lists whose items must be among ``choices``."""

    def convert(text: str) -> tuple[str, ...]:
        items = tuple(x.strip() for x in text.split(",") if x.strip())
        if not items:
            raise argparse.ArgumentTypeError(f"empty {what} list; choose from {', '.join(choices)}")
        bad = [x for x in items if x not in choices]
        if bad:
            raise argparse.ArgumentTypeError(
                f"unknown {what} {', '.join(map(repr, bad))}; valid: {', '.join(choices)}"
            )
        return items

    return convert


def names_list(text: str) -> tuple[str, ...]:
    """Back-end names; checked against the registry once every back end is registered."""
    items = tuple(x.strip() for x in text.split(",") if x.strip())
    if not items:
        raise argparse.ArgumentTypeError("empty back-end list; name at least one, or 'default' or 'all'")
    return items


def profile(text: str) -> str:
    if text not in ("auto", *PROFILES):
        raise argparse.ArgumentTypeError(
            f"unknown profile {text!r}; valid: auto, {', '.join(PROFILES)} (auto: 'default' on a GPU, 'cpu' without)"
        )
    return text


def timer(text: str) -> str:
    if text not in TIMER_KINDS:
        raise argparse.ArgumentTypeError(f"unknown timer {text!r}; valid: {', '.join(TIMER_KINDS)}")
    return text


Number = TypeVar("Number", int, float)


def _positive(what: str, parse: Callable[[str], Number], noun: str) -> Callable[[str], Number]:
    def convert(text: str) -> Number:
        try:
            value = parse(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{what} must be {noun}, got {text!r}") from None
        if not value > 0:
            raise argparse.ArgumentTypeError(f"{what} must be positive, got {text!r}")
        return value

    return convert


def positive_float(what: str) -> Callable[[str], float]:
    return _positive(what, float, "a number")


def positive_int(what: str) -> Callable[[str], int]:
    return _positive(what, int, "a whole number")


def precision(text: str) -> float:
    """A relative precision: ``0.01`` or ``1%``; must lie in (0, 1)."""
    raw = text.strip()
    try:
        value = float(raw[:-1]) / 100 if raw.endswith("%") else float(raw)
    except ValueError:
        raise argparse.ArgumentTypeError(f"precision must look like 0.01 or 1%, got {text!r}") from None
    if not 0 < value < 1:
        raise argparse.ArgumentTypeError(f"precision must be between 0 and 1 (e.g. 0.01 or 1%), got {text!r}")
    return value


def min_samples(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"min samples must be an integer, got {text!r}") from None
    if value < 5:
        raise argparse.ArgumentTypeError(f"min samples must be >= 5 to estimate precision, got {value}")
    return value


def fraction(what: str) -> Callable[[str], float]:
    """``6%`` or ``0.06`` (see :func:`pytest_attn.gate.parse_fraction`)."""
    from .gate import parse_fraction

    def convert(text: str) -> float:
        try:
            return parse_fraction(text, what)
        except ValueError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None

    return convert


def adhoc_case(text: str) -> Variant:
    from .adhoc import AdhocError, parse_case

    try:
        return parse_case(text)
    except AdhocError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def lock_clocks(text: str) -> LockRequest:
    try:
        return parse_lock(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def head_dims(text: str) -> tuple[int, ...]:
    """Comma-separated positive head dims, e.g. ``64,128``."""
    try:
        dims = tuple(int(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"head dims must be comma-separated integers, got {text!r}") from None
    if not dims or any(d <= 0 for d in dims):
        raise argparse.ArgumentTypeError(f"head dims must be positive integers, got {text!r}")
    return dims


dtypes = comma_list(DTYPES, "dtype")
directions = comma_list(DIRECTIONS, "direction")


@dataclass(frozen=True)
class AttnOptions:
    profile: str = "auto"
    backends: tuple[str, ...] = ("default",)
    dtypes: tuple[str, ...] | None = None
    directions: tuple[str, ...] | None = None
    peak_tflops: float | None = None
    timer: str = "auto"
    precision: float = 0.01
    max_time_s: float | None = None
    min_samples: int = 10
    verify: bool = True
    drop_throttled: bool = False
    verify_timing: bool = False
    adhoc: tuple[Variant, ...] = ()
    trace_dir: str | None = None

    def resolve_backends(self, known: list[str], defaults: list[str]) -> tuple[str, ...]:
        """Expand 'default'/'all' and check every name; ValueError lists the valid names."""
        out: list[str] = []
        for name in self.backends:
            expanded = defaults if name == "default" else known if name == "all" else [name]
            for n in expanded:
                if n not in known:
                    raise ValueError(
                        f"--attn-backends: unknown back end {n!r}; valid: {', '.join(known)} (or 'default', 'all')"
                    )
                if n not in out:
                    out.append(n)
        return tuple(out)

    def stop_rule(self, profile: str) -> StopRule:
        cap = self.max_time_s if self.max_time_s is not None else DEFAULT_MAX_TIME_S[profile]
        return StopRule(target_precision=self.precision, min_samples=self.min_samples, max_time_s=cap)
