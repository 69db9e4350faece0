"""Several workers, one run: what each test is expected to cost, the order problems are handed out in, and how
busy each worker was. Pure; :mod:`pytest_attn.plugin.scheduling` wires it to pytest-xdist.

* **Cost of a test**, from the first source that has it (:func:`expected_cost`): the baseline the run is gated
  against (a record's ``timing.elapsed_s``: from its first input to its last sample, ``prepare_s`` included),
  the newest saved run that holds the test, else a model (:func:`model_cost_s`): a set-up cost per case plus a
  nominal number of calls, each the longer of its FLOPs at a nominal rate and its minimal bytes at a nominal
  bandwidth, times a factor for back ends that do much more than the minimal work; a test that is no attention
  case and was never measured gets the others' median (:func:`guess_unknown`).
* **Order** (:func:`plan`): a problem's tests stay together (one unit, one worker: "vs best" compares results of
  one GPU) -- but a problem that alone would take longer than a worker's share of the run goes case by case (kept
  whole it bounds the run: HunyuanVideo fwd+bwd, 76 of the committed selection's 184 s, held ``-n 4`` on 4 x
  H200 to 0.53x of one process; its table then says it spans GPUs), and in a paired A/B every case is a unit of
  its own (its verdict is its two arms' pairs, on one GPU) -- units longest first; the plugin hands the next unit
  to whichever worker comes free first (LPT list scheduling), so a worker that finishes early takes more.
  :func:`simulate` plays that out on expected costs.
* **Busy** (:func:`busy_lines`): per worker, the cases it measured, their own time summed, and when its first
  case started and its last ended, so the balance shows.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from .case import AttnCase
from .flops import work


@dataclass(frozen=True)
class Rates:
    """A nominal machine for :func:`model_cost_s`: what a case costs before its first sample, and how fast a call
    goes. Rough on purpose: it only orders cases that have no measured time yet."""

    setup_s: float  # inputs, the check against the reference, warm-up, the timer: before the first sample
    flops_per_s: float
    bytes_per_s: float
    calls: int = 12  # warm-up, the check and the samples of a case whose calls are long (H200 baseline: 10-13)


#: fitted by eye to the committed H200 baseline (median prepare 0.14 s; a 0.4 s call costs 4.8 s in all)
GPU_RATES = Rates(setup_s=0.15, flops_per_s=400e12, bytes_per_s=3e12)
CPU_RATES = Rates(setup_s=0.05, flops_per_s=20e9, bytes_per_s=10e9)
#: back ends that do far more than the minimal work: the math path writes the whole score matrix, the
#: reference computes in fp64
SLOWER = {"reference": 20.0, "sdpa-math": 4.0, "sdpa-loop": 4.0}
DEFAULT_COST_S = 1.0  # a test that is no attention case and has no measured time, where no test has one either
#: A paired A/B case against the same case's plain time: its four arms' set-up and the pairs. Fitted on 4 x H200
#: (docs/gpu-validation.md#the-paired-ab): 2.9x + 1.7 s (A/A, 113 cases), 4.3x + 1.3 s (2 % injected), 4.4x + 2.8 s
#: (the 34 cuDNN cases alone).
AB_SCALE, AB_CASE_S = 3.5, 2.0


@dataclass(frozen=True)
class Facts:
    """What a worker knows of one collected test, for the controller's plan: the benchmark's name (the node id
    without xdist's ``@group``), its problem, and, for an attention case, its work and back end."""

    name: str
    problem: str  # the case's group; a test that is no attention case is a problem of its own (its node id)
    backend: str = ""
    flops: int = 0
    min_bytes: int = 0


def case_facts(name: str, case: AttnCase) -> Facts:
    """An attention case's facts under its benchmark ``name``: its problem, back end and work."""
    w = work(case)
    return Facts(name, case.group, case.backend, w.flops, w.min_bytes)


@dataclass(frozen=True)
class Cost:
    seconds: float
    source: str  # "baseline", "saved run", "model" or "default"


def model_cost_s(flops: int, min_bytes: int, backend: str, rates: Rates) -> float:
    """A case's expected seconds from its work alone: ``setup + calls x max(flops / rate, bytes / bandwidth)``,
    the call's time scaled by :data:`SLOWER` for its back end."""
    call_s = max(flops / rates.flops_per_s, min_bytes / rates.bytes_per_s) * SLOWER.get(backend, 1.0)
    return rates.setup_s + rates.calls * call_s


def expected_cost(facts: Facts, baseline: Mapping[str, float], saved: Mapping[str, float], rates: Rates) -> Cost:
    """The expected seconds of one test, from the first source that knows it (see the module's docstring)."""
    if facts.name in baseline:
        return Cost(baseline[facts.name], "baseline")
    if facts.name in saved:
        return Cost(saved[facts.name], "saved run")
    if facts.backend:
        return Cost(model_cost_s(facts.flops, facts.min_bytes, facts.backend, rates), "model")
    return Cost(DEFAULT_COST_S, "default")


def ab_cost(cost: Cost) -> Cost:
    """What a case costs in a paired A/B, from its plain cost (:data:`AB_SCALE`, :data:`AB_CASE_S`). Pure."""
    return Cost(AB_SCALE * cost.seconds + AB_CASE_S, cost.source)


def guess_unknown(costs: Sequence[Cost]) -> list[Cost]:
    """``costs`` with each "default" one (a test that is no attention case, never measured) set to the median of
    the others: a neutral guess that sends it neither first nor last. Pure."""
    known = sorted(c.seconds for c in costs if c.source != "default")
    if not known:
        return list(costs)
    middle = (known[(len(known) - 1) // 2] + known[len(known) // 2]) / 2
    return [Cost(middle, "the others' median") if c.source == "default" else c for c in costs]


@dataclass(frozen=True)
class Unit:
    """Tests that go to one worker together: one problem's back ends, in collection order (``split``: one case of
    a problem too long to keep whole)."""

    problem: str
    tests: tuple[str, ...]
    cost_s: float
    split: bool = False


def plan(tests: Sequence[tuple[str, str, float]], whole: bool = True, workers: int = 1) -> list[Unit]:
    """``(test, problem, cost)`` in collection order -> one unit per problem (``whole``; else one per test), but one
    per test of a problem that costs more than the whole over ``workers`` (see the module), longest first (ties
    keep the collection's order)."""
    order: list[str] = []
    members: dict[str, list[tuple[str, float]]] = {}
    for test, group, cost in tests:
        problem = group if whole else test
        if problem not in members:
            order.append(problem)
            members[problem] = []
        members[problem].append((test, cost))
    share = sum(cost for _, _, cost in tests) / max(1, workers)
    units: list[Unit] = []
    for problem in order:
        cost = sum(c for _, c in members[problem])
        if workers > 1 and cost > share and len(members[problem]) > 1:
            units += [Unit(problem, (test,), c, split=True) for test, c in members[problem]]
        else:
            units.append(Unit(problem, tuple(t for t, _ in members[problem]), cost))
    return sorted(units, key=lambda u: -u.cost_s)  # stable: equal costs keep their order


def shares(costs: Mapping[str, float], count: int) -> dict[str, int]:
    """Each problem's share (1 to ``count``) of a run split over ``count`` runners: longest first (ties by name), to
    the share with the least so far (the lowest among ties), so every runner with the same costs draws the same
    shares. Pure."""
    if count < 1:
        raise ValueError(f"count={count}: at least one share is needed")
    loads = [0.0] * count
    drawn = {}
    for problem in sorted(costs, key=lambda p: (-costs[p], p)):
        least = min(range(count), key=lambda k: (loads[k], k))
        drawn[problem] = least + 1
        loads[least] += costs[problem]
    return drawn


def simulate(units: Sequence[Unit], workers: int) -> list[float]:
    """Each worker's summed cost when every unit, in order, goes to the worker that comes free first (the
    lowest-numbered among ties), as the plugin hands them out when every cost is exact."""
    if workers < 1:
        raise ValueError(f"workers={workers}: at least one worker is needed")
    loads = [0.0] * workers
    for unit in units:
        free = min(range(workers), key=lambda w: (loads[w], w))
        loads[free] += unit.cost_s
    return loads


def lower_bound_s(units: Sequence[Unit], workers: int) -> float:
    """No schedule that keeps units whole ends sooner: the longest unit, or the work spread evenly."""
    if not units:
        return 0.0
    return max(max(u.cost_s for u in units), sum(u.cost_s for u in units) / workers)


def plan_line(units: Sequence[Unit], workers: int, sources: Mapping[str, int], whole: bool = True) -> str:
    """What the plan expects, for the start of the run (``whole``: units are problems, else single cases)."""
    loads = simulate(units, workers)
    known = ", ".join(f"{n} from {source}" for source, n in sorted(sources.items(), key=lambda kv: -kv[1]) if n)
    bound = lower_bound_s(units, workers)
    what = "problem(s) over {} workers, longest first, each whole on one worker" if whole else \
        "case(s) over {} workers, longest first, each case's pairs on one worker"
    if not whole:
        known = f"{known or 'none'}; an A/B case {AB_SCALE:g}x its plain time + {AB_CASE_S:g} s"
    split: dict[str, float] = {}
    for unit in units:
        if unit.split:
            split[unit.problem] = split.get(unit.problem, 0.0) + unit.cost_s
    line = (f"{len(units) - sum(u.split for u in units) + len(split)} {what.format(workers)} (expected costs:"
            f" {known or 'none'}): expected {max(loads, default=0.0):.1f} s per worker at most, of {sum(loads):.1f} s"
            " in all")
    if split:
        one = len(split) == 1
        line += (f"; but {', '.join(f'{p} ({s:.1f} s)' for p, s in split.items())} {'goes' if one else 'go'} case by"
                 f" case: kept whole, {'it' if one else 'each'} alone would take longer than a worker's share"
                 f" ({sum(loads) / workers:.1f} s) and bound the run ({'its table says' if one else 'their tables say'}"
                 " which GPUs measured it)")
    if units and bound == units[0].cost_s and bound > sum(loads) / workers:
        line += (f"; the longest {'problem' if whole and not units[0].split else 'case'} alone ({units[0].problem},"
                 f" {bound:.1f} s) bounds the run: more workers cannot end it sooner")
    return line


@dataclass(frozen=True)
class Busy:
    """One worker's share of the run, its times in seconds from the run's start."""

    worker: str
    where: str  # "GPU 0 (NVIDIA H200)"; "" without a GPU
    cases: int
    cases_s: float  # the measured cases' own time (each record's elapsed_s), summed
    first_s: float | None  # its first test's start
    last_s: float | None  # its last test's end
    ready_s: float | None = None  # when it had collected (its compile phase, if any, follows it)
    died: str = ""  # how it ended early ("died while running ...")
    started_s: float | None = None  # its process's start


def busy_lines(workers: Sequence[Busy], seconds: Callable[[float], str] = lambda s: f"{s:.1f} s") -> list[str]:
    """A line per worker -- cases, their own time, from when to when -- and one for the spread of their ends."""
    lines = []
    for w in workers:
        where = f" on {w.where}" if w.where else ""
        started = f"started at {seconds(w.started_s)}, " if w.started_s is not None and w.ready_s is not None else ""
        ready = f"{started}collected at {seconds(w.ready_s)}; " if w.ready_s is not None else ""
        if w.first_s is None or w.last_s is None:
            span = "ran nothing"
        else:
            span_s = w.last_s - w.first_s
            share = f" ({w.cases_s / span_s:.0%} of that span in cases)" if span_s > 0 and w.cases else ""
            span = (f"{w.cases} case(s), {seconds(w.cases_s)} of their own time, from {seconds(w.first_s)} to"
                    f" {seconds(w.last_s)}{share}")
        lines.append(f"worker {w.worker}{where}: {ready}{span}" + (f"; {w.died}" if w.died else ""))
    ends = [w.last_s for w in workers if w.last_s is not None]
    if len(ends) > 1:
        lines.append(f"workers: the first ended at {seconds(min(ends))}, the last at {seconds(max(ends))}"
                     f" ({seconds(max(ends) - min(ends))} apart)")
    return lines
