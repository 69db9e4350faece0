"""Compare the medians of two pytest-benchmark JSON files case by case (run-to-run agreement).

    python scripts/compare_runs.py run1.json run2.json [--min-ms 1.0]
"""

from __future__ import annotations

import argparse
import json
import sys

from pytest_attn.verdicts.runs import Bench, benches


def load(path: str) -> dict[str, Bench]:
    with open(path) as fh:
        return benches(json.load(fh))


def clock(bench: Bench) -> float | None:
    return bench.record.clocks.sm_clock_mhz if bench.record is not None else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--min-ms", type=float, default=0.0, help="only cases at least this long")
    args = ap.parse_args()
    a, b = load(args.a), load(args.b)
    worst = 0.0
    for name in sorted(set(a) & set(b)):
        ma, mb = a[name].median_s, b[name].median_s
        if ma * 1e3 < args.min_ms:
            continue
        diff = (mb - ma) / ma
        worst = max(worst, abs(diff))
        print(f"{name:70s} {ma*1e3:10.4f} ms {mb*1e3:10.4f} ms {diff*100:+7.2f}%  clocks {clock(a[name])} /"
              f" {clock(b[name])}")
    print(f"largest difference: {worst*100:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
