"""``python -m pytest_attn.fuzz [--backends-from FILE] '<case json>' [...]``: replay examples as a fuzz
failure prints them, on this machine; exit status 1 when one fails, 2 when the back end refuses one here
(or cannot be found). Built-in back ends and those of installed entry points are known; one registered by
a conftest needs that file (``--backends-from conftest.py``, as the failure's replay command says): its
``pytest_attn_register_backends(registry, config)`` is called with ``config=None``."""

from __future__ import annotations

import argparse
import sys

from ..backends import QUIET_WARNINGS, assemble_registry
from ..backends.base import RegistryError, Unsupported
from ..core.codec import case_from_json
from ..engine.probe import probe_device
from .example import failure_message, run_example


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m pytest_attn.fuzz", description=__doc__.splitlines()[0])
    parser.add_argument("--backends-from", action="append", default=[], metavar="FILE",
                        help="a file that registers back ends (a conftest.py with pytest_attn_register_backends)")
    parser.add_argument("cases", nargs="+", metavar="CASE_JSON", help="a case JSON printed by a fuzz failure")
    return parser


def main(argv: list[str] | None = None) -> int:
    """Replay one or more examples (case JSONs as a failure prints them); exit 1 if any fails."""
    args = _parser().parse_args(sys.argv[1:] if argv is None else argv)
    for quiet in QUIET_WARNINGS:
        quiet.install()
    try:
        registry = assemble_registry(files=args.backends_from)
    except RegistryError as exc:
        print(f"python -m pytest_attn.fuzz: {exc}", file=sys.stderr)
        return 2
    device, _ = probe_device()
    status = 0
    for text in args.cases:
        case, seed = case_from_json(text)
        try:
            backend = registry.get(case.backend)
        except RegistryError as exc:
            print(f"python -m pytest_attn.fuzz: {exc}. A back end registered by a conftest: add --backends-from"
                  " path/to/conftest.py", file=sys.stderr)
            return 2
        try:
            check = run_example(case, backend, device, seed)
        except Unsupported as exc:
            print(f"{case.backend} refuses {case.describe()} here: {exc}")
            status = max(status, 2)
            continue
        if check.ok:
            print(f"passes: {case.backend} on {case.describe()}: {check.describe(case)}")
        else:
            print(failure_message(case, seed, check, registry.origin(case.backend)))
            status = 1
    return status


if __name__ == "__main__":
    raise SystemExit(main())
