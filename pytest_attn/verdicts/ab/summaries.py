"""Reports of a paired A/B run (``--attn-ab``): the terminal table, Markdown (pull-request comment,
``$GITHUB_STEP_SUMMARY``), CSV and JSON. Pure except :func:`write_ab_reports`."""

from __future__ import annotations

import io
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ..render import csv_rows, explained, markdown_table, verdict_counts, write_files
from ..runs import partial_note
from ..table import fmt_time
from .paired import AB_LEAST, AbResult

HEADER = ("benchmark", "A", "B", "B/A time", "B/A cycles", "B/A judged", "95% CI", "verdict", "clock A", "clock B",
          "pairs")
#: The verdict's column, for the Markdown's bold.
VERDICT_COLUMN = HEADER.index("verdict")
EXPLAINED = ("SLOWER", "FASTER", "AMBIGUOUS")
LEGEND = ("judged: what the verdict and the CI are of -- where every block's mean SM clock was read on the GPU, time at"
          " equal clock (time x clock ** s, s the case's clock sensitivity fitted on its pairs: 1 = cycles, for a"
          " kernel bound by the SM clock; 0 = time, for one bound by memory), else time")


def _pct(x: float) -> str:
    return f"{x * 100:+.1f}%"


def _mhz(x: float | None) -> str:
    return f"{x:.0f} MHz" if x else "-"


def _row(r: AbResult) -> tuple[str, ...]:
    """The CI is of what the verdict judged (time at equal clock where the clocks were measured, else time)."""
    lo, hi = r.paired.interval()
    cycles = r.cycles_change
    judged = _pct(r.paired.change) + {"time": " (time)", "cycles": " (s=1)"}.get(r.paired.basis, "")
    if r.paired.clock_sensitivity is not None:
        judged += f" (s={r.paired.clock_sensitivity:.2f})"
    return (r.name.split("::")[-1], fmt_time(r.a_median_s), fmt_time(r.b_median_s), _pct(r.paired.in_time_change),
            _pct(cycles) if cycles is not None else "-", judged, f"[{_pct(lo)}, {_pct(hi)}]", r.paired.verdict,
            _mhz(r.a_mhz), _mhz(r.b_mhz), str(r.paired.pairs))


def counts(results: Sequence[AbResult]) -> str:
    return verdict_counts((r.paired.verdict for r in results), "no case measured", by_name=True)


def cost(results: Sequence[AbResult]) -> str:
    """Where the A/B's time went, over its cases: every replica setting each case up, the pairs, the records."""
    prepare, pairs, records, again = (sum(getattr(r, f) for r in results)
                                      for f in ("prepare_s", "elapsed_s", "records_s", "replace_s"))
    replaced = sum(1 for r in results if r.places > 1)
    more = (f" ({again:.1f} s of it setting {replaced} undecided case(s) up again at new places)" if replaced
            else "")
    return (f"time over {len(results)} case(s): setting each case up in every arm's replicas {prepare:.1f} s, the"
            f" pairs {pairs:.1f} s{more}, the arms' records {records:.1f} s")


#: where an AMBIGUOUS case stopped because time or pairs ran out, not because it was decided
CAPS = ("time-cap", "noise-cap", "pair-cap")
#: node ids written out in a rerun line before "and N more"
RERUN_IDS = 6


def longer(results: Sequence[AbResult], max_time_s: float) -> str:
    """What to do with the cases left AMBIGUOUS at a cap: rerun only them, with twice ``max_time_s``
    (``--attn-max-time``) -- more pairs and more set-ups at new places (docs/gpu-validation.md#the-paired-ab).
    "" where there are none."""
    capped = [r.name for r in results if r.paired.verdict == "AMBIGUOUS" and r.stop in CAPS]
    if not capped:
        return ""
    ids = " ".join(f"'{name}'" for name in capped[:RERUN_IDS])
    more = f" and {len(capped) - RERUN_IDS} more (ab.json lists them)" if len(capped) > RERUN_IDS else ""
    return (f"{len(capped)} AMBIGUOUS case(s) stopped at a cap, undecided after --attn-max-time={max_time_s:g} (the"
            " pairs' noise, or where each arm's data sit, which more set-ups average): rerun only them, with this"
            f" run's options and --attn-max-time={2 * max_time_s:g}: pytest {ids}{more}")


def explain(r: AbResult, threshold: float) -> str:
    lo, hi = r.paired.interval()
    basis = {"time": "in time", "cycles": "in cycles"}.get(r.paired.basis, "at equal SM clock")
    text = (f"B/A {_pct(r.paired.change)} {basis} (95% CI {_pct(lo)} to {_pct(hi)}, {r.paired.pairs}"
            f" pairs) against a threshold of {threshold:.1%}")
    small = []
    if r.paired.verdict == "AMBIGUOUS" and (lo > 0 or hi < 0) and abs(r.paired.change) < AB_LEAST * threshold:
        small = [f"beyond the pairs' noise but under the {AB_LEAST * threshold:.2%} a paired A/B calls"
                 f" {'slower' if lo > 0 else 'faster'} (an H100 A/A of unchanged code read +1.10 % so, once in"
                 " 1,398 cases); rerun it to tell"]
    return "; ".join([text, *small, *r.notes()])


def terminal_lines(results: Sequence[AbResult], arms: Sequence[str], threshold: float,
                   notes: Sequence[str] = ()) -> list[str]:
    rows = [HEADER, *(_row(r) for r in results)]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    lines = [f"paired A/B at a {threshold:.1%} threshold: {counts(results)}", *(f"  {a}" for a in arms),
             f"  {cost(results)}", f"  {LEGEND}"]
    lines += ["  " + "  ".join(cell.ljust(w) if i == 0 else cell.rjust(w) for i, (cell, w) in
                                enumerate(zip(row, widths, strict=True))) for row in rows]
    lines += [f"  {r.paired.verdict}: {r.name.split('::')[-1]}: {explain(r, threshold)}" for r in results
              if r.paired.verdict in EXPLAINED or r.notes()]
    return lines + [f"  note: {n}" for n in notes]


def markdown(results: Sequence[AbResult], arms: Sequence[str], threshold: float,
             fail_on: Sequence[str] = ("SLOWER",), partial: str = "", next_step: str = "") -> str:
    """The A/B summary in Markdown; ``partial``: how the run was cut short (then it never says "no regression":
    the cases it did not reach were not judged); ``next_step``: what to do about the undecided (:func:`longer`)."""
    out = io.StringIO()
    failing = sum(r.paired.verdict in fail_on for r in results)
    head = "B is slower" if failing else f"partial run, no regression in the cases judged ({partial})" if partial \
        else "no regression"
    out.write(f"### pytest-attn A/B: {head} ({counts(results)})\n\n")
    out.write("".join(f"- {a}\n" for a in arms) + f"- threshold {threshold:.1%}; verdicts from paired blocks\n"
              f"- {cost(results)}\n- {LEGEND}\n\n")
    out.write(markdown_table(HEADER, ((_row(r), r.paired.verdict in fail_on) for r in results), VERDICT_COLUMN))
    said = [r for r in results if r.paired.verdict in EXPLAINED or r.notes()]
    if said:
        out.write("\n" + explained((r.name.split("::")[-1], r.paired.verdict, explain(r, threshold)) for r in said))
    if next_step:
        out.write(f"\n**Next:** {next_step}\n")
    return out.getvalue()


def csv_text(results: Sequence[AbResult]) -> str:
    return csv_rows(["benchmark", "group", "backend", "a_s", "b_s", "change", "ci_low", "ci_high", "verdict", "pairs",
                     "a_mhz", "b_mhz", "cycles_change", "basis", "clock_sensitivity", "time_change", "stop", "timer",
                     "notes"],
                    map(_csv_row, results))


def _csv_row(r: AbResult) -> list[object]:
    lo, hi = r.paired.interval()
    return [r.name, r.group, r.backend, r.a_median_s, r.b_median_s, f"{r.paired.change:.6f}", f"{lo:.6f}",
            f"{hi:.6f}", r.paired.verdict, r.paired.pairs, r.a_mhz or "", r.b_mhz or "",
            "" if r.cycles_change is None else f"{r.cycles_change:.6f}", r.paired.basis,
            "" if r.paired.clock_sensitivity is None else f"{r.paired.clock_sensitivity:.3f}",
            f"{r.paired.in_time_change:.6f}", r.stop, r.timer, "; ".join(r.notes())]


def write_ab_reports(folder: Path, results: Sequence[AbResult], arms: Sequence[str], threshold: float,
                     fail_on: Sequence[str] = ("SLOWER",), partial: dict[str, Any] | None = None,
                     next_step: str = "") -> list[str]:
    """summary.md, results.csv and ab.json into ``folder``; a "wrote PATH" line per file. ``partial``: the run
    was cut short (``attn_partial``: why, cases measured and selected), said in the summary and ab.json."""
    said = partial_note({"attn_partial": partial}) or "" if partial else ""
    doc: dict[str, Any] = {"arms": list(arms), "threshold": threshold, "results": [r.to_json() for r in results]}
    if partial:
        doc["attn_partial"] = partial
    return write_files(folder, {"summary.md": markdown(results, arms, threshold, fail_on, said, next_step),
                                "results.csv": csv_text(results), "ab.json": json.dumps(doc, indent=1)})


def read_ab_report(path: str | Path) -> tuple[list[str], float, list[AbResult]]:
    """An ``ab.json`` that :func:`write_ab_reports` wrote: (its arms, threshold, results). ValueError, saying
    what to give, where it cannot be read."""
    try:
        doc = json.loads(Path(path).read_text())
        results = [AbResult.from_json(r) for r in doc.get("results", [])]
    except (OSError, ValueError, TypeError, KeyError) as exc:
        raise ValueError(f"cannot read {path}: {exc}; give the ab.json an --attn-report run wrote") from exc
    return [str(a) for a in doc.get("arms", [])], float(doc.get("threshold") or 0.02), results
