"""``python -m pytest_attn.capture OUT.json script.py [args]``: run a script as ``python script.py [args]``
would, under capture, and write the workload it made. ``-m module`` runs a module instead of a file."""

from __future__ import annotations

import argparse
import runpy
import sys
from collections.abc import Sequence
from pathlib import Path

from ..core.workload import Workload, workload_name
from .patching import capture

USAGE = "python -m pytest_attn.capture [--name NAME] OUT.json (script.py | -m module) [args ...]"


def parse(argv: Sequence[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m pytest_attn.capture", usage=USAGE,
                                     description="Run a script under capture and write its attention calls as a"
                                                 " workload file for pytest --attn-workload.")
    parser.add_argument("--name", help="the workload's name (default: OUT's name up to its first dot)")
    parser.add_argument("out", type=Path, help="the workload file to write")
    parser.add_argument("-m", dest="module", help="run this module (as python -m) instead of a script")
    parser.add_argument("target", nargs=argparse.REMAINDER, help="script.py and its arguments")
    args = parser.parse_args(argv)
    if not args.module and not args.target:
        parser.error("give the script to run (or -m module)")
    if not args.module and not Path(args.target[0]).is_file():
        parser.error(f"script {args.target[0]!r} not found (from {Path.cwd()})")
    if not args.out.parent.is_dir():
        parser.error(f"OUT {str(args.out)!r}: folder {str(args.out.parent)!r} does not exist")
    return args


def summary(workload: Workload, out: Path) -> list[str]:
    calls = sum(r.count for r in workload.records)
    lines = [f"wrote {out}: {len(workload.records)} distinct attention call(s), {calls} in all"]
    for r in workload.unsupported:
        lines.append(f"  not replayable: record {r.order} ({r.call.api} at {r.site}, x{r.count}): {r.call.unsupported}")
    if not workload.records:
        lines.append("  no attention call was seen: does the model call one of the captured entry points, looked up"
                     " when called (not imported by name before the capture started)?")
    return lines


def main(argv: Sequence[str] | None = None) -> int:
    args = parse(sys.argv[1:] if argv is None else argv)
    target = f"-m {args.module}" if args.module else args.target[0]
    saved = sys.argv[:]
    sys.argv = [args.module or args.target[0], *(args.target if args.module else args.target[1:])]
    try:
        with capture(args.out, name=args.name or workload_name(args.out),
                     source=f"python -m pytest_attn.capture {args.out} {' '.join([target, *sys.argv[1:]])}") as c:
            if args.module:
                runpy.run_module(args.module, run_name="__main__", alter_sys=True)
            else:
                runpy.run_path(args.target[0], run_name="__main__")
    finally:
        sys.argv = saved
    assert c.workload is not None
    print("\n".join(summary(c.workload, args.out)))
    return 0
