"""Compare the medians of two pytest-benchmark JSON files case by case (run-to-run agreement).

    python scripts/compare_runs.py run1.json run2.json [--min-ms 1.0]
"""

from __future__ import annotations

import argparse
import json
import sys


def load(path: str) -> dict[str, dict]:
    with open(path) as fh:
        return {b["name"]: b for b in json.load(fh)["benchmarks"]}


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("a")
    ap.add_argument("b")
    ap.add_argument("--min-ms", type=float, default=0.0, help="only cases at least this long")
    args = ap.parse_args()
    a, b = load(args.a), load(args.b)
    worst = 0.0
    for name in sorted(set(a) & set(b)):
        ma, mb = a[name]["stats"]["median"], b[name]["stats"]["median"]
        if ma * 1e3 < args.min_ms:
            continue
        diff = (mb - ma) / ma
        worst = max(worst, abs(diff))
        ca = a[name]["extra_info"].get("sm_clock_mhz")
        cb = b[name]["extra_info"].get("sm_clock_mhz")
        print(f"{name:70s} {ma*1e3:10.4f} ms {mb*1e3:10.4f} ms {diff*100:+7.2f}%  clocks {ca} / {cb}")
    print(f"largest difference: {worst*100:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
