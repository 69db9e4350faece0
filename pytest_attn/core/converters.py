"""Command-line values: a parser ``text -> value`` that raises ``ValueError`` with its reason, turned into
``argparse.ArgumentTypeError`` naming the option -- so a bad value stops at start-up with the reason, in the
pytest plugin's options and in ``pytest-attn merge`` alike (argparse would otherwise say "invalid <lambda>
value"). Pure."""

from __future__ import annotations

import argparse
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


def option_value(what: str, parse: Callable[[str], T]) -> Callable[[str], T]:
    """``parse`` with its ValueError turned into argparse's error, named after the option ``what``."""

    def convert(text: str) -> T:
        try:
            return parse(text)
        except ValueError as exc:
            message = str(exc)
            raise argparse.ArgumentTypeError(message if what in message else f"{what}: {message}") from None

    convert.__name__ = what.lstrip("-").replace("-", "_")  # what argparse names when the parser gives up
    return convert
