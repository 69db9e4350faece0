"""Paired A/B runs judged again by this checkout's rule: each report's recorded verdicts against what the rule
gives now on the same pairs, and the cases it changes -- from the ``ab.json`` of ``--attn-ab ...
--attn-report=DIR`` runs.

    python scripts/ab_rejudge.py DIR/ab.json [MORE/ab.json ...]

For a change to the verdict rule: replay A/A runs (every SLOWER or FASTER a false alarm) and runs with a
slowdown injected (every verdict but SLOWER a miss) before spending GPU time on new ones.
"""

from __future__ import annotations

import argparse
import sys
from collections import Counter

from pytest_attn.verdicts.ab.rejudge import tally
from pytest_attn.verdicts.ab.summaries import read_ab_report


def _counts(c: Counter[str]) -> str:
    return ", ".join(f"{n} {v}" for v, n in sorted(c.items())) or "none"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", nargs="+", help="ab.json files of paired A/B runs")
    args = ap.parse_args(argv)
    total_rec: Counter[str] = Counter()
    total_now: Counter[str] = Counter()
    try:
        reports = [read_ab_report(path) for path in args.reports]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    for path, (arms, threshold, results) in zip(args.reports, reports, strict=True):
        recorded, now, changed = tally(results, threshold)
        total_rec += recorded
        total_now += now
        print(f"{path}: {len(results)} case(s) [{' | '.join(arms)[:120]}]")
        print(f"  recorded: {_counts(recorded)}\n  now:      {_counts(now)}")
        for c in changed:
            print(f"    {c.recorded} -> {c.now}: {c.name} ({c.change:+.2%})")
    if len(args.reports) > 1:
        print(f"all {len(args.reports)} reports: recorded {_counts(total_rec)}; now {_counts(total_now)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
