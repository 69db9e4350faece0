"""Percentages on the command line: ``5%`` or the fraction ``0.05``. Pure; the one parser for every
option that takes one (precision, thresholds, the deliberate slowdown)."""

from __future__ import annotations

import math


def parse_percent(text: str, what: str, *, upper: float = 1.0, inclusive: bool = False) -> float:
    """``5%`` or ``0.05`` -> 0.05, more than 0 and less than ``upper`` (or at most, with ``inclusive``).
    A bare number is a fraction: ``5`` would mean 500 %, so a bare number above 1 is refused with the
    fix rather than read that way."""
    raw = text.strip()
    percent = raw.endswith("%")
    try:
        value = float(raw[:-1]) / 100 if percent else float(raw)
    except ValueError:
        raise ValueError(f"{what} {text!r} is not a number or a percentage (e.g. 5% or 0.05)") from None
    if not math.isfinite(value):
        raise ValueError(f"{what} {text!r} must be a finite percentage (e.g. 5% or 0.05)")
    if not percent and value > 1:
        raise ValueError(f"{what} {text!r} reads as {value:.0%}: write it with a % sign (e.g. {raw}%) or as a"
                         " fraction (e.g. 0.05)")
    limit = f"at most {upper:.0%}" if inclusive else f"less than {upper:.0%}"
    if not value > 0 or (value > upper if inclusive else value >= upper):
        raise ValueError(f"{what} {text!r} must be more than 0 and {limit} (e.g. 5% or 0.05)")
    return value
