"""``pytest-attn merge a.json b.json ...``: the JSON files of shards (``--attn-shard=I/N`` on several
runners, or any runs that measured different problems) merged into one run: the summary a single run
of them all would print, one merged JSON, the reports, and the gate, per device model as a session does.

``pytest-attn baseline add BASELINE RUN.json ...`` adds runs to a baseline as repeats; ``pytest-attn baseline power
BASELINE RUN.json`` says what it can catch on the GPU of a clean run (:mod:`.power`).

``pytest-attn recover [JOURNAL] --json out.json``: the journal a run that died left behind
(:mod:`pytest_attn.core.journal`) turned into pytest-benchmark JSON, marked partial ("the process died"), which
``merge`` and ``--attn-baseline`` read as any run; the journal is then removed. No torch, no pytest.

Exit status as pytest's: 0 when the gate passes (or there is none), 1 when it fails, 4 for bad input (a bad
option, a file that is not a run -- whatever is wrong with it, named --, shards that overlap, shards measured on two
GPU models, a shard missing or one that measured nothing, a baseline of another device, a --json or --report path
that cannot be written). Exit 1 means the gate failed, nothing else.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path
from typing import Any, NoReturn

from ..core.converters import option_value
from ..core.files import InputError, probe_writable, read_json, write_atomic
from ..core.journal import FOLDER, held, orphans, read_journal, recovered_run
from .baseline import add_runs, baseline_path, check_run, load_baseline, stored_fingerprint
from .decision import by_device, gate, refusal
from .merge import MergeError, empty_shards, merge_runs, models_problem, shard_problems
from .power import case_powers, power_lines
from .reports import write_reports
from .reruns import combine_reruns
from .rule import DEFAULT_THRESHOLD, Thresholds, parse_fraction, parse_override
from .runs import benches, partial_headline, partial_note, records
from .table import render, time_lines
from .verdict import DEFAULT_FAIL_ON, parse_fail_on

OK, FAILED, USAGE = 0, 1, 4


class _Parser(argparse.ArgumentParser):
    """argparse, with pytest's exit status for a usage error (4, not argparse's 2)."""

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        self.exit(USAGE, f"{self.prog}: error: {message}\n")


DESCRIPTION = ("pytest-attn's command line. The benchmarks themselves run under pytest (pytest --help lists the"
               " --attn-* options); this tool works on their saved JSON.")
BASELINE = ("Add saved runs (--benchmark-json files of the baseline's selection, measured on other GPUs or hosts of"
            " its GPU model) to a baseline as repeats. Each repeat keeps the GPU that measured it, so the gate"
            " measures how much the model's GPUs differ instead of assuming it. Exit status: 0 added, 4 bad input.")
MERGE = ("Merge the JSON files of shards (--attn-shard=I/N on several runners, or runs that measured different"
         " problems) into one run: the summary a single run of them all would print, one merged JSON, the reports,"
         " and the gate, per device model. Shards of two GPU models, and a shard missing or one that measured"
         " nothing, are refused. With --reruns, the files are instead runs of the same cases (the selection run"
         " again), gated as one. Exit status: 0 the gate passed (or there is none), 1 it failed, 4 bad input.")


def _version() -> str:
    try:
        return f"pytest-attn {metadata.version('pytest-attn')}"
    except metadata.PackageNotFoundError:  # run from a checkout that was not installed
        return "pytest-attn (not installed: run from a checkout)"


def _merge_parser(sub: Any) -> None:
    merge = sub.add_parser("merge", help="merge shards' JSON files into one summary, JSON, report and gate",
                           description=MERGE)
    merge.add_argument("files", nargs="+", type=Path, help="pytest-benchmark JSON files of pytest-attn runs")
    merge.add_argument("--json", type=Path, help="write the merged run here")
    merge.add_argument("--report", type=Path, metavar="DIR", help="write summary.md, results.csv and plots here")
    merge.add_argument("--baseline", default="auto", metavar="PATH|auto|off",
                       help="gate against this baseline; auto = baselines/<device-key>/baseline.json per device"
                            " model where it exists (default)")
    merge.add_argument("--baselines-dir", type=Path, default=Path("baselines"), metavar="DIR")
    merge.add_argument("--threshold", type=option_value("--threshold", lambda t: parse_fraction(t, "--threshold")),
                       default=DEFAULT_THRESHOLD, metavar="PCT")
    merge.add_argument("--threshold-for", type=option_value("--threshold-for", parse_override), action="append",
                       default=[], metavar="KIND:NAME=PCT")
    merge.add_argument("--fail-on", type=option_value("--fail-on", parse_fail_on), default=DEFAULT_FAIL_ON,
                       metavar="LIST")
    merge.add_argument("--speedup-vs", default="sdpa-math", metavar="BACKEND")
    merge.add_argument("--allow-partial", action="store_true",
                       help="merge shards that are not the whole run (one missing, or of another run); the merged"
                            " run is marked partial")
    merge.add_argument("--reruns", action="store_true",
                       help="the files are runs of the same cases (the selection run again): each case's medians are"
                            " repeats of the GPU that measured each, and the gate judges their centre with the noise of"
                            " that many runs (a 5%% slowdown on a GPU the baseline never saw is caught more often)")


def _parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="pytest-attn", description=DESCRIPTION)
    parser.add_argument("--version", action="version", version=_version())
    sub = parser.add_subparsers(dest="command", required=True, metavar="{merge,baseline,recover}")
    _merge_parser(sub)
    base = sub.add_parser("baseline", help="add saved runs to a baseline as repeats (from other GPUs or hosts)",
                          description=BASELINE)
    base_sub = base.add_subparsers(dest="action", required=True, metavar="{add,power}")
    add = base_sub.add_parser("add", help="add runs' JSON to BASELINE as repeats, each tagged with its GPU",
                              description=BASELINE)
    add.add_argument("baseline", type=Path, help="the baseline file (created from the first run where missing)")
    add.add_argument("files", nargs="+", type=Path, help="--benchmark-json files of the baseline's selection")
    add.add_argument("--restart-retimed", action="store_true",
                     help="a case these runs timed by another timer (or calls per sample) than its stored repeats"
                          " starts over from them, its stored repeats dropped (else it is refused and kept as"
                          " stored): after an upgrade that times some cases otherwise, run unpinned"
                          " (--attn-baseline=off)")
    power = base_sub.add_parser("power", help="what BASELINE can catch on the GPU of a clean run: the expected share"
                                " of a slowdown read SLOWER", description=POWER)
    power.add_argument("baseline", type=Path, help="the baseline file")
    power.add_argument("run", type=Path, help="a clean run's --benchmark-json against it, on the GPU in question")
    power.add_argument("--slowdown", type=option_value("--slowdown", lambda t: parse_fraction(t, "--slowdown")),
                       default=DEFAULT_THRESHOLD, metavar="PCT", help="the slowdown to catch (default: 5%%)")
    power.add_argument("--threshold", type=option_value("--threshold", lambda t: parse_fraction(t, "--threshold")),
                       default=DEFAULT_THRESHOLD, metavar="PCT", help="the gate's --attn-threshold (default: 5%%)")
    recover = sub.add_parser("recover", help="turn the journal of a run that died into a run's JSON, marked partial",
                             description=RECOVER)
    recover.add_argument("journal", nargs="?", type=Path, metavar="JOURNAL",
                         help=f"the journal ({FOLDER}/*.jsonl); default: the one left by a run that died, in"
                              f" {FOLDER} here or in a folder above")
    recover.add_argument("--json", type=Path, required=True, help="write the recovered run here")
    return parser


def baseline(args: argparse.Namespace, out: list[str]) -> int:
    if args.action == "power":
        return power(args, out)
    runs = [(str(path), read_json(path, "run")) for path in args.files]
    out.extend(add_runs(args.baseline, runs, restart_retimed=args.restart_retimed))
    return OK


POWER = ("What a baseline can catch on a GPU: from a clean run against it on that GPU, the share of a slowdown"
         " (--slowdown, 5% by default) each case is expected to read SLOWER, from its noise, and at best (the run's"
         " own noise taken away: what the spread between GPUs of the model leaves). Exit status: 0, 4 bad input.")


def power(args: argparse.Namespace, out: list[str]) -> int:
    base = load_baseline(args.baseline)
    run = check_run(read_json(args.run, "run"), str(args.run))
    found = records(run)
    if not found:
        raise InputError(f"{args.run} holds no pytest-attn result records")
    for fp, _ in by_device(found).values():
        refused, _ = refusal(base, str(args.baseline), fp)
        if refused:
            raise InputError(refused)
    gpus = sorted({r.device.uuid or r.device.name for r in found})
    where = f"{args.baseline} on {', '.join(gpus)} (from {args.run})"
    out.extend(power_lines(case_powers(benches(base), benches(run), Thresholds(args.threshold), args.slowdown),
                           args.slowdown, where))
    return OK


RECOVER = ("Turn the journal a run left behind when its process died (a segfault, abort() in a library, a kill)"
           " into pytest-benchmark JSON marked partial, which pytest-attn merge and --attn-baseline=PATH read as any"
           " run; the journal is then removed. Exit status: 0 recovered, 4 bad input.")


def _read(paths: Sequence[Path]) -> list[tuple[str, dict]]:
    """Each file through the one JSON reader and the run check: what is wrong with a file is said with its name."""
    return [(str(path), check_run(read_json(path, "shard"), str(path), empty_ok=True)) for path in paths]


def _writable(args: argparse.Namespace) -> None:
    """The --json file's folder and the --report folder, before anything is merged: a path that cannot be
    written is bad input (exit 4), said now -- not an OSError after the work."""
    for flag, folder in (("--json", args.json.parent if args.json else None), ("--report", args.report)):
        if folder is None:
            continue
        try:
            folder.mkdir(parents=True, exist_ok=True)
            probe_writable(folder)  # (a name of its own, never through a link planted there)
        except OSError as exc:
            raise InputError(f"{flag}: cannot write in {folder} ({exc.strerror or exc}); give a path you can"
                             " write to") from None


def _problems(runs: Sequence[tuple[str, dict[str, Any]]], allow_partial: bool, out: list[str]) -> list[str]:
    """Why ``runs`` are not one whole run: refused (two GPU models always; a shard missing or that measured
    nothing unless ``--allow-partial``), else what the merged run is marked partial for."""
    models = models_problem(runs)
    if models:
        raise MergeError(models)
    empty, notes = empty_shards(runs)
    problems = shard_problems(runs) + empty
    out.extend(f"note: {note}" for note in notes)
    if problems and not allow_partial:
        raise MergeError("; ".join(problems) + ". Merge every shard of one run, each of which measured its cases (a"
                         " missing one: did its job fail or its upload?), or pass --allow-partial to merge these"
                         " anyway, marked partial")
    return problems


def _reruns(runs: Sequence[tuple[str, dict[str, Any]]], allow_partial: bool, out: list[str]) -> tuple[dict, list]:
    """``runs`` combined as reruns (:mod:`.reruns`), and what the combined run is marked partial for."""
    models = models_problem(runs)
    if models:
        raise MergeError(models)
    cut = [f"{name} is a partial run ({partial_note(run)})" for name, run in runs if run.get("attn_partial")]
    if cut and not allow_partial:
        raise MergeError("; ".join(cut) + ": a run cut short is no rerun of the whole. Rerun it, or pass"
                         " --allow-partial to combine these anyway, marked partial")
    combined, lines = combine_reruns(runs)
    combined.pop("attn_partial", None)
    out.extend(f"reruns: {line}" for line in lines)
    return combined, cut


def _gate_each(args: argparse.Namespace, merged: dict[str, Any], found: list[Any], partial: str | None,
               more_notes: list[str], out: list[str]) -> int:
    """The gate and the reports of the merged run, per device model; the exit status."""
    status = OK
    thresholds = Thresholds.build(args.threshold, args.threshold_for)
    measured = stored_fingerprint(merged)  # the libraries the shards measured (not this process's)
    for fp, mine in by_device(found, libraries=measured.libraries if measured else None).values():
        named = args.baseline not in ("auto", "off")
        path = Path(args.baseline) if named else baseline_path(args.baselines_dir, fp.key)
        base: dict[str, Any]
        if args.baseline == "off" or (not named and not path.exists()):
            if args.baseline != "off":
                out.append(f"no stored baseline for {fp.device} ({path}): every result is NEW")
            if args.report is None:
                continue
            base, name = {"benchmarks": []}, "none"  # a report still has the figures: every result NEW
        else:
            base, name = load_baseline(path), str(path)
        outcome = gate(mine, base, name, fp, thresholds, args.fail_on, named)
        out.extend(outcome.lines)
        if args.report is not None:
            notes = [*outcome.notes, *more_notes]
            out.extend(f"  {w}" for w in write_reports(args.report, outcome.comparisons, name, mine, notes,
                                                        args.fail_on, partial))
        status = max(status, {"pass": OK, "fail": FAILED, "error": USAGE}[outcome.status])
    return status


def merge(args: argparse.Namespace, out: list[str]) -> int:
    _writable(args)
    runs = _read(args.files)
    if args.reruns:
        merged, problems = _reruns(runs, args.allow_partial, out)
    else:
        problems = _problems(runs, args.allow_partial, out)
        merged = merge_runs(runs)
    if problems:
        out.append(f"--allow-partial: merged anyway, marked partial: {'; '.join(problems)}")
        earlier = (merged.get("attn_partial") or {}).get("reason")
        reason = f"merged with --allow-partial: {'; '.join(problems)}" + (f"; {earlier}" if earlier else "")
        merged["attn_partial"] = {"reason": reason,
                                  "cases_measured": len(merged["benchmarks"]), "cases_selected": None}
    found = records(merged)
    if not found:
        raise MergeError("the files hold no pytest-attn result records (runs of pytest-attn 0.1 or newer)")
    rerun = (f"{len(args.files)} runs gated as one (--reruns): a case in several is gated on the centre of its runs,"
             " with the noise of that many (and of its GPUs, where they differ)" if args.reruns else "")
    out.append(f"merged {len(args.files)} file(s): {len(found)} results" + (f"; {rerun}" if rerun else ""))
    partial = partial_headline(merged)
    if partial:  # the headline of a merge that is not the whole run says so, and never "no regression"
        out.append(f"{partial} ({partial_note(merged)}): the verdicts below are of the cases it holds")
    devices = list({r.device.uuid or r.device.name: r.device for r in found}.values())
    out.extend(time_lines(found) + render(found, devices[0], (), args.speedup_vs))
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        write_atomic(args.json, json.dumps(merged, indent=2, sort_keys=True))
        out.append(f"wrote {args.json}")
    return _gate_each(args, merged, found, partial, [rerun] if rerun else [], out)


def _the_orphan() -> Path:
    """The one journal a run that died left in ``.pytest-attn/journals`` of this folder or the nearest above."""
    here = Path.cwd()
    folder = next((d / FOLDER for d in (here, *here.parents) if (d / FOLDER).is_dir()), None)
    if folder is None:
        raise InputError(f"no {FOLDER} folder here or above: name the journal (the run that died printed it at"
                         " the next run's start)")
    found = orphans(folder)
    if len(found) != 1:
        listed = f": {', '.join(map(str, found))}; name one" if found else ""
        raise InputError(f"{len(found)} journals of runs that died in {folder}{listed}")
    return found[0]


def recover(args: argparse.Namespace, out: list[str]) -> int:
    path = args.journal or _the_orphan()
    if held(path):
        raise InputError(f"journal {path} is held by a run that is still going; recover it once that run has"
                         " ended (a run that ends normally removes its journal itself)")
    journal = read_journal(path)
    if not journal.benchmarks:
        raise InputError(f"journal {path} holds no measured case (the run died before its first ended); nothing to"
                         f" recover: remove it (rm {path})")
    _writable(argparse.Namespace(json=args.json, report=None))
    run = check_run(recovered_run(journal), f"the run recovered from {path}")
    write_atomic(args.json, json.dumps(run, indent=2, sort_keys=True, allow_nan=False) + "\n")
    path.unlink()
    torn = "; the case it was writing when the process died was cut short: left out" if journal.torn else ""
    died = run["attn_partial"]["reason"]
    out.append(f"recovered {len(journal.benchmarks)} measured case(s) of the run that died ({died})"
               f" into {args.json}, marked partial{torn}; journal {path} removed. Read it as any run: pytest-attn merge"
               f" {args.json}, or pytest --attn-baseline={args.json}")
    return OK


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    out: list[str] = []
    try:
        commands = {"baseline": baseline, "recover": recover, "merge": merge}
        status = commands[args.command](args, out)
    except InputError as exc:  # a merge, a baseline, a journal or a file that cannot be used
        out.append(f"pytest-attn {args.command}: {exc}")
        status = USAGE
    except OSError as exc:  # a write that failed after the check (a full disk)
        out.append(f"pytest-attn {args.command}: cannot write {exc.filename or 'a file'}: {exc.strerror or exc};"
                   " nothing half-written was left. Free space (or give another path) and rerun")
        status = USAGE
    print("\n".join(out))
    return status


if __name__ == "__main__":
    sys.exit(main())
