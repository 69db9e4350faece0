"""``python -m pytest_attn.fuzz '<case json>' [...]``: replay examples as a fuzz failure prints them,
on this machine; exit status 1 when one fails, 2 when the back end refuses one here."""

from __future__ import annotations

import sys

from ..backends import QUIET_WARNINGS, builtin_registry
from ..backends.base import Unsupported
from ..core.codec import case_from_json
from ..engine.probe import probe_device
from .fuzzer import failure_message, run_example


def main(argv: list[str] | None = None) -> int:
    """Replay one or more examples (case JSONs as a failure prints them); exit 1 if any fails."""
    args = sys.argv[1:] if argv is None else argv
    if not args:
        print("usage: python -m pytest_attn.fuzz '<case json printed by a fuzz failure>' [...]", file=sys.stderr)
        return 2
    for quiet in QUIET_WARNINGS:
        quiet.install()
    device, _ = probe_device()
    registry = builtin_registry()
    status = 0
    for text in args:
        case, seed = case_from_json(text)
        try:
            check = run_example(case, registry.get(case.backend), device, seed)
        except Unsupported as exc:
            print(f"{case.backend} refuses {case.describe()} here: {exc}")
            status = max(status, 2)
            continue
        if check.ok:
            print(f"passes: {case.backend} on {case.describe()}: {check.describe(case)}")
        else:
            print(failure_message(case, seed, check))
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
