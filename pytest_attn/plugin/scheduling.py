"""pytest-xdist's scheduler for an attention run: whole problems (single cases for a problem too long to keep
whole, and in a paired A/B), longest first, to whichever worker comes free first (the plan is
:mod:`pytest_attn.core.schedule`'s; this is its wiring to xdist's ``Scheduling`` protocol).

* The costs come from the baseline the run is gated against, else the newest saved run holding the test, else the
  model; each worker writes what it collected (problems, work, back ends) for the controller (:mod:`.handover`).
* Work goes out a unit (a problem, or a case) at a time: a worker gets its next unit when it has one test left
  (xdist's worker holds its last test until it knows the next), so one that finishes early takes more.
* The run starts when the first worker has collected (and built what its cases need): a worker still importing
  or compiling joins when it is ready instead of holding the others back. While some have not, a worker takes a
  second unit only where the queue holds more than one for each of them.
* A worker that dies: xdist fails the test it was running; the rest of its unit goes, whole, to the next worker
  that asks (its replacement, if every other is done).

Nothing here imports pytest-xdist at start-up: the plugin loads in every pytest session, with or without it.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pytest

from ..core.schedule import (
    CPU_RATES,
    GPU_RATES,
    Facts,
    Unit,
    ab_cost,
    expected_cost,
    guess_unknown,
    plan,
    plan_line,
)
from ..verdicts.baseline import BaselineError, baseline_path, load_baseline
from ..verdicts.fingerprint import gpu_key
from ..verdicts.runs import benches
from .handover import Collector, read_plan
from .session import ATTN_SESSION, VISIBLE_GPUS, options_of, terminal_say

if TYPE_CHECKING:
    from xdist.workermanage import WorkerController

SAVED_RUNS_READ = 5  # the newest saved runs read for their times: older ones would only cost start-up
PLAN_FOLDER = pytest.StashKey[Path]()  # the controller's folder for the workers' plans (made in workers)


def elapsed_by_name(run: Mapping[str, Any]) -> dict[str, float]:
    """Each result's own time in a run (its record's ``elapsed_s``, a sustained phase included), by name."""
    out = {}
    for name, bench in benches(run).items():
        if bench.record is not None and bench.record.timing.elapsed_s > 0:
            sustained = bench.record.sustained.phase_s if bench.record.sustained else 0.0
            out[name] = bench.record.timing.elapsed_s + sustained
    return out


def baseline_times(config: pytest.Config) -> tuple[dict[str, float], str]:
    """The gated baseline's times, and its path: ``--attn-baseline=PATH``, or the stored baseline of this run's
    GPU model (none on a CPU: its folder needs the probed CPU model, which the controller does not probe)."""
    attn = config.stash[ATTN_SESSION]
    gpus = config.stash.get(VISIBLE_GPUS, [])
    if attn.gate.baseline == "off" or (attn.gate.baseline == "auto" and not gpus):
        return {}, ""
    path = Path(attn.gate.baseline) if attn.gate.baseline != "auto" else \
        baseline_path(attn.gate.baselines_dir, gpu_key(gpus[0].name))
    try:
        return (elapsed_by_name(load_baseline(path)), str(path)) if path.is_file() else ({}, "")
    except BaselineError:  # the gate says what is wrong with it; the plan does without
        return {}, ""


def saved_times(config: pytest.Config) -> dict[str, float]:
    """Each test's time in the newest saved run of pytest-benchmark's file storage that holds it."""
    storage = str(config.getoption("benchmark_storage", "") or "")
    if not storage.startswith("file://") or not Path(storage[7:]).is_dir():
        return {}
    files = sorted(Path(storage[7:]).rglob("*.json"), key=lambda p: p.stat().st_mtime, reverse=True)
    out: dict[str, float] = {}
    for path in files[:SAVED_RUNS_READ]:
        try:
            run = json.loads(path.read_text())
            out = {**elapsed_by_name(run), **out}  # a newer run's time wins
        except (OSError, ValueError, TypeError, KeyError, AttributeError):
            continue
    return out


def problem_of(nodeid: str) -> str:
    """A test's problem from its node id alone (a remote worker sent no plan): xdist's ``@group`` suffix."""
    return nodeid.rsplit("@", 1)[1] if nodeid.rfind("@") > nodeid.rfind("]") else nodeid


def make_plan(config: pytest.Config) -> Callable[[Sequence[str], str, int], list[Unit]]:
    """The planner the scheduler calls once the first worker collected: its node ids, its id, the workers."""
    def planned(collection: Sequence[str], worker: str, workers: int) -> list[Unit]:
        folder = config.stash.get(PLAN_FOLDER, None)
        facts = (read_plan(folder, worker) if folder is not None else None) or {}
        collector = config.pluginmanager.get_plugin(Collector.NAME)
        if isinstance(collector, Collector) and facts:
            collector.tracks.cases_collected = sum(1 for n in collection if n in facts and facts[n].backend)
        baseline, where = baseline_times(config)
        saved = saved_times(config)
        rates = GPU_RATES if config.stash.get(VISIBLE_GPUS, []) else CPU_RATES
        whole = options_of(config).ab is None  # a paired A/B's verdicts are per case: its cases go one by one
        sources: dict[str, int] = {}
        known = [facts.get(n) or Facts(n.rsplit("@", 1)[0] if "@" in n else n, problem_of(n)) for n in collection]
        costs = guess_unknown([expected_cost(fact, baseline, saved, rates) for fact in known])
        costs = costs if whole else [ab_cost(cost) for cost in costs]
        for cost in costs:
            label = f"the baseline {where}" if cost.source == "baseline" else cost.source
            sources[label] = sources.get(label, 0) + 1
        units = plan([(n, f.problem, c.seconds) for n, f, c in zip(collection, known, costs, strict=True)], whole,
                     workers)
        if units:
            terminal_say(config)(plan_line(units, workers, sources, whole))
        return units

    return planned


class CostScheduling:
    """pytest-xdist's ``Scheduling`` protocol (see ``xdist/scheduler/protocol.py``), handing out whole problems,
    longest first, to the worker that comes free first."""

    def __init__(self, config: pytest.Config, planner: Callable[[Sequence[str], str, int], list[Unit]],
                 workers: int) -> None:
        self.config = config
        self.planner = planner
        self.workers = workers
        self.collection: list[str] | None = None
        self.index: dict[str, int] = {}
        self.pending: dict[WorkerController, list[int]] = {}  # sent, not yet complete, in the order sent
        self.collected: set[WorkerController] = set()
        self.ever: set[str] = set()  # every worker that collected, by id: the ones still to come are the others
        self.queue: list[Unit] | None = None  # planned when the first worker collected

    @property
    def nodes(self) -> list[WorkerController]:
        return list(self.pending)

    @property
    def collection_is_completed(self) -> bool:
        """True once any worker collected: the run starts then; the others join as they are ready."""
        return self.collection is not None

    @property
    def tests_finished(self) -> bool:
        if self.queue is None or self.queue:
            return False
        return all(len(sent) < 2 for sent in self.pending.values())  # a worker runs its last one at shutdown

    @property
    def has_pending(self) -> bool:
        return bool(self.queue) or any(self.pending.values())

    def add_node(self, node: WorkerController) -> None:
        self.pending[node] = []

    def add_node_collection(self, node: WorkerController, collection: Sequence[str]) -> None:
        if self.collection is None:
            self.collection = list(collection)
            self.index = {nodeid: i for i, nodeid in enumerate(self.collection)}
        elif list(collection) != self.collection:
            from xdist.report import report_collection_diff

            first = next(iter(self.collected)).gateway.id if self.collected else "the first worker"
            message = report_collection_diff(self.collection, list(collection), first, node.gateway.id)
            self.config.hook.pytest_collectreport(report=pytest.CollectReport(
                node.gateway.id, "failed", longrepr=message or "another collection", result=[]))
            node.shutdown()
            return
        self.collected.add(node)
        self.ever.add(node.gateway.id)

    def schedule(self) -> None:
        if self.collection is None:
            return
        if self.queue is None:
            first = next(iter(self.collected)).gateway.id
            self.queue = self.planner(self.collection, first, self.workers)
        for node in [n for n in self.nodes if not self.pending[n]] + self.nodes:  # one each first, then more
            self._fill(node)

    def mark_test_complete(self, node: WorkerController, item_index: int, duration: float = 0) -> None:
        self.pending[node].remove(item_index)
        self._fill(node)

    def mark_test_pending(self, item: str) -> None:
        """A test to run again (a plugin's ``pytest_handlecrashitem`` asks): first in the queue, on its own."""
        assert self.queue is not None
        self.queue.insert(0, Unit(item, (item,), 0.0))
        for node in self.nodes:
            self._fill(node)

    def remove_pending_tests_from_node(self, node: WorkerController, indices: Sequence[int]) -> None:
        raise NotImplementedError("pytest-attn's scheduler never asks a worker to give tests back")

    def remove_node(self, node: WorkerController) -> str | None:
        """A worker gone: None when it had finished its work; else the test it died in (xdist fails it), and the
        rest of its problem back at the head of the queue, whole, for the next worker that asks."""
        left = self.pending.pop(node)
        self.collected.discard(node)
        if not left:
            return None
        assert self.collection is not None and self.queue is not None
        rest = tuple(self.collection[i] for i in left[1:])
        if rest:
            self.queue.insert(0, Unit(f"the rest of {node.gateway.id}'s work", rest, 0.0))
            for other in self.nodes:
                self._fill(other)
        return self.collection[left[0]]

    def _fill(self, node: WorkerController) -> None:
        """Keep ``node`` two tests ahead (xdist's worker holds its last test until it knows the next), but leave a
        problem for each worker still starting -- the longest ones: a look-ahead skips them; with the queue empty,
        tell it to finish."""
        if node.shutting_down or node not in self.collected or self.queue is None:
            return
        sent = self.pending[node]
        starting = max(0, self.workers - len(self.ever))
        while self.queue and (not sent or (len(sent) < 2 and len(self.queue) > starting)):
            # the first worker ready took an A/B's two longest cases (~100 s each on 4 x H200) and ended 36 s last
            unit = self.queue.pop(starting if sent else 0)
            indices = [self.index[t] for t in unit.tests]
            sent.extend(indices)
            node.send_runtest_some(indices)
        if not self.queue:
            node.shutdown()


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> CostScheduling | None:
    """The controller of an attention run's workers (``--dist=loadgroup``, which pytest-attn chooses for ``-n``):
    this scheduler; any other ``--dist`` the user chose is left to xdist."""
    if config.stash.get(PLAN_FOLDER, None) is None or config.getvalue("dist") != "loadgroup":
        return None
    return CostScheduling(config, make_plan(config), len(config.getoption("tx", None) or []))
