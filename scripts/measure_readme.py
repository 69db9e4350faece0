"""Re-run every timed command the README states, as written, and print the recorded figure beside today's.

    python scripts/measure_readme.py --cpu                    # the CPU figures (a machine without a GPU)
    python scripts/measure_readme.py --gpu                    # the GPU figures (smoke cold, warm, compile-only)
                                                              # and the recipes' GPU commands, in a fresh folder
    python scripts/measure_readme.py --cpu --update-doc       # ... and write today's into docs/gpu-validation.md

The "How long it takes" tables live in docs/gpu-validation.md (the one home of dated figures; the README
states no timings), between ``<!-- measured:cpu -->`` / ``<!-- measured:gpu -->`` markers and the matching end
markers; ``--update-doc`` replaces one with today's table, the device and the date, so every figure there is
the output of this command's last run. Run from the repository root, in the environment the README's install
made (the commands are run through the shell, as a reader would).
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: Where the measured tables live (``--update-doc`` writes them there).
DOC = ROOT / "docs" / "gpu-validation.md"
sys.path.insert(0, str(ROOT / "tests"))
from readme_blocks import commands  # noqa: E402  (the README's marked blocks; tests/test_readme.py runs the CPU ones)


@dataclass(frozen=True)
class Timed:
    command: str  # as the README states it
    note: str = ""  # what the row is (cold, warm, ...)
    before: str = ""  # run first, untimed (e.g. empty the JIT caches)
    repeat: int = 1  # runs in a row (each a row)
    files: tuple[tuple[str, str], ...] = ()  # a recipe's: the command runs in a fresh folder holding them
    exits: frozenset[int] = frozenset({0})  # the exit statuses the README says it ends with


def readme_gpu_commands() -> tuple[Timed, ...]:
    """The README's commands marked ``<!-- run: gpu -->``: its recipes, as written, in a fresh folder."""
    return tuple(Timed(c.line.partition("  #")[0].strip(), f"README, {c.section}", files=c.files, exits=c.exits)
                 for c in commands() if c.kind == "gpu")


CPU = (
    Timed("pytest tests/", "the plugin's own tests: the fast tier", repeat=2),
    Timed("pytest tests/ -m e2e", "the end-to-end tier (real processes, transformers)"),
    Timed("pytest suites/", "the CPU profile", before="rm -rf .benchmarks"),
    Timed("pytest suites/ -n 2", "the CPU profile, two processes"),
    Timed("pytest suites/test_fuzz_varlen.py", "the CPU fuzz run (ci profile)"),
    Timed("python .ci/plugin_cost.py", "pytest-attn in an unrelated project: what it costs a run"),
)
GPU = (
    Timed("pytest suites/ --attn-profile=smoke", "empty JIT caches (FlashInfer, FA4)",
          before="rm -rf .ficache .fa4cache .benchmarks"),
    Timed("pytest suites/ --attn-profile=smoke", "again, warm caches"),
    Timed("pytest suites/ --attn-profile=smoke --attn-compile-only", "warm caches: the compile phase alone"),
)


def device(kind: str) -> str:
    if kind == "gpu":
        done = subprocess.run(["nvidia-smi", "--query-gpu=name,driver_version", "--format=csv,noheader"],
                              capture_output=True, text=True)
        return done.stdout.strip().splitlines()[0].replace(", ", ", driver ") if done.returncode == 0 else "GPU ?"
    model = next((line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                  if line.startswith("model name")), platform.processor() or "CPU")
    return f"{model}, {len(os.sched_getaffinity(0))} CPUs"


def outcome(text: str) -> str:
    """What the run said at its end: pytest's last line, or the plugin-cost line."""
    cost = re.search(r"the plugin costs ([+-][0-9.]+ s)", text)
    if cost:
        return f"the plugin costs {cost[1]}"
    last = re.findall(r"=+ (.*? in [0-9.]+s.*?) =+", text)
    return last[-1] if last else text.strip().splitlines()[-1][:120] if text.strip() else ""


def run(timed: Timed, logs: Path | None = None) -> list[tuple[str, float, int, str]]:
    rows = []
    for i in range(timed.repeat):
        if timed.before:
            subprocess.run(timed.before, shell=True, cwd=ROOT, check=True)
        folder = Path(tempfile.mkdtemp(prefix="readme-")) if timed.files else ROOT
        for name, text in timed.files:
            (folder / name).write_text(text)
        start = time.perf_counter()
        done = subprocess.run(timed.command, shell=True, cwd=folder, capture_output=True, text=True)
        took = time.perf_counter() - start
        rows.append((timed.note, took, done.returncode, outcome(done.stdout + done.stderr)))
        if logs is not None:
            logs.mkdir(parents=True, exist_ok=True)
            name = re.sub(r"[^a-z0-9]+", "-", f"{timed.command} {timed.note} {i}".lower()).strip("-")
            (logs / f"{name}.txt").write_text(done.stdout + done.stderr)
        print(f"  {timed.command} ({timed.note}): {took:.1f} s, exit {done.returncode}: {rows[-1][3]}", flush=True)
    return rows


def recorded_figures(kind: str, text: str | None = None) -> dict[str, list[str]]:
    """The recorded figures (wall time), by command (in order), from the marked table of ``text`` (the doc's)."""
    block = _block(DOC.read_text() if text is None else text, kind)
    figures: dict[str, list[str]] = {}
    for line in (block or "").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 3 and cells[0].startswith("`"):
            figures.setdefault(cells[0].strip("`"), []).append(cells[2])
    return figures


def _block(text: str, kind: str) -> str | None:
    match = re.search(rf"<!-- measured:{kind} -->\n(.*?)<!-- /measured:{kind} -->", text, re.S)
    return match[1] if match else None


def with_table(text: str, kind: str, new: str) -> str | None:
    """``text`` with its ``kind`` table replaced by ``new``; None where it has no such block."""
    if _block(text, kind) is None:
        return None
    return re.sub(rf"(<!-- measured:{kind} -->\n).*?(<!-- /measured:{kind} -->)", lambda m: m[1] + new + m[2], text,
                  flags=re.S)


def table(kind: str, results: list[tuple[Timed, list[tuple[str, float, int, str]]]]) -> str:
    lines = ["| command | what | wall time | how it ended |", "| --- | --- | --- | --- |"]
    for timed, rows in results:
        for note, took, code, said in rows:
            status = "" if code in timed.exits else f" (exit {code})"
            lines.append(f"| `{timed.command}` | {note} | {took:.0f} s{status} | {said} |")
    flag = "--gpu" if kind == "gpu" else "--cpu"
    lines.append("")
    lines.append(f"Measured by `python scripts/measure_readme.py {flag}` on {datetime.date.today().isoformat()},"
                 f" {device(kind)}.")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--cpu", action="store_true", help="the CPU figures (the 2-core CI machine)")
    where.add_argument("--gpu", action="store_true", help="the GPU figures (smoke cold, warm, compile-only)")
    parser.add_argument("--update-doc", "--update-readme", dest="update", action="store_true",
                        help=f"write today's table into {DOC.relative_to(ROOT)}")
    parser.add_argument("--logs", type=Path, metavar="DIR", help="keep each run's whole output here")
    args = parser.parse_args(argv)
    kind = "gpu" if args.gpu else "cpu"
    before = recorded_figures(kind)
    print(f"measuring the README's {kind.upper()} figures on {device(kind)}:")
    results = [(timed, run(timed, args.logs)) for timed in (GPU + readme_gpu_commands() if args.gpu else CPU)]
    print(f"\n{'command':58} {'recorded':>12} {'today':>8}")
    for timed, rows in results:
        old = before.get(timed.command, [])
        for i, (_, took, code, _) in enumerate(rows):
            shown = old[i] if i < len(old) else "-"
            status = "" if code in timed.exits else f"  exit {code}"
            print(f"{timed.command[:58]:58} {shown:>12} {took:>6.0f} s{status}")
    new = table(kind, results)
    print("\n" + new)
    if args.update:
        updated = with_table(DOC.read_text(), kind, new)
        if updated is None:
            print(f"{DOC.relative_to(ROOT)} has no <!-- measured:{kind} --> block to update", file=sys.stderr)
            return 2
        DOC.write_text(updated)
        print(f"{DOC.relative_to(ROOT)}: the {kind.upper()} table rewritten")
    return 1 if any(code not in timed.exits for timed, rows in results for _, _, code, _ in rows) else 0


if __name__ == "__main__":
    sys.exit(main())
