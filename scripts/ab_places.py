"""Which cases where an arm's data sit moves, pooled over paired A/B runs: each case's place SD (one replica
set-up's, as a relative SD of its time), from the ``ab.json`` of ``--attn-ab ... --attn-report=DIR`` runs.

    python scripts/ab_places.py DIR/ab.json [MORE/ab.json ...] [--top 20]

A case at a quarter of the A/B threshold or more (0.5 % at 2 %) tends to stay AMBIGUOUS at --attn-max-time=1:
give it more time (the A/B's ``next:`` line names the ones a run left undecided).
"""

from __future__ import annotations

import argparse
import sys

from pytest_attn.verdicts.ab.places import place_spread
from pytest_attn.verdicts.ab.summaries import read_ab_report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("reports", nargs="+", help="ab.json files of paired A/B runs")
    ap.add_argument("--top", type=int, default=20, help="the cases with the largest place SD to print")
    args = ap.parse_args(argv)
    try:
        reports = [read_ab_report(path) for path in args.reports]
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    threshold = reports[-1][1]
    spread = place_spread([r for _, _, results in reports for r in results])
    if not spread:
        print("no case with two replica set-ups of two pairs or more in these reports")
        return 1
    quarter = threshold / 4
    width = max(len(p.name) for p in spread[: args.top])
    print(f"{'case'.ljust(width)}  place SD  set-ups  runs")
    for p in spread[: args.top]:
        print(f"{p.name.ljust(width)}  {p.sd:7.2%}  {p.set_ups:7d}  {p.runs:4d}")
    many = sum(p.sd >= quarter for p in spread)
    print(f"{len(spread)} cases; {many} at a quarter of the threshold ({quarter:.2%}) or more: give them more"
          " --attn-max-time; "
          f"{sum(p.sd < 0.002 for p in spread)} under 0.2 %")
    return 0


if __name__ == "__main__":
    sys.exit(main())
