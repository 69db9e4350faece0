"""The hand-over between pytest-xdist's workers and their controller: both ends of the channel, and every key
on it, in one place.

**Controller -> worker** (``workerinput``, when the worker starts): :data:`GPUS`, the run's GPUs in order,
:data:`SEAT`, the place among them of the one this worker takes, and :data:`PLAN_DIR`, a folder for its plan.

**Worker -> controller, at its collection** (a file in :data:`PLAN_DIR`, by :func:`send_plan`: xdist's own
message carries only the node ids): what the scheduler needs of each test (:class:`~..core.schedule.Facts`),
read by :func:`read_plan`.

**Worker -> controller, in each test report** (``user_properties``, JSON text: it crosses processes as it is),
by :func:`send`: :data:`RECORD` (a result record), :data:`SKIP` (why a case was skipped), :data:`FAILED`
(the back end of a case that failed), :data:`AB_RESULT` (a
paired A/B case's outcome) and :data:`AB_ARMS` (what each of its arms runs).

**Worker -> controller, at its end** (``workeroutput``), by :func:`send_at_end`: :data:`SESSION_LINES` (its
session lines: where it ran, ceilings, compile phase, notes, its shard) and :data:`FUZZ_REACH` (its fuzz reach).

On the controller, :class:`Collector` (registered where workers are started) takes each report's items into the
session and keeps each worker's share of the run (:class:`Track`: cases, their time, first start, last end,
when it was ready, how it died), and :func:`pytest_testnodedown` a finished worker's output.
"""

from __future__ import annotations

import json
import time
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import pytest

from ..core.files import write_atomic
from ..core.record import Record
from ..core.schedule import Facts
from ..verdicts.ab.paired import AbResult
from .session import AB_HANDED, AB_WORKER_LINES, ATTN_SESSION, FUZZ_REACH, SHARD

GPUS = "pytest_attn_gpus"
SEAT = "pytest_attn_seat"  # the worker's GPU: its place in GPUS (a replacement takes the place of the one it replaces)
PLAN_DIR = "pytest_attn_plan_dir"
RECORD = "pytest_attn_record"
SKIP = "pytest_attn_skip"
FAILED = "pytest_attn_failed"
AB_RESULT = "pytest_attn_ab"
AB_ARMS = "pytest_attn_ab_arms"
SESSION_LINES = "pytest_attn"
FUZZ_REACH_OUTPUT = "pytest_attn_fuzz_reach"  # [back end, direction, Reach JSON] each


def send(request: pytest.FixtureRequest, key: str, value: Any) -> None:
    """A worker: ``value`` to the controller in this test's report (``key`` one of the per-report keys)."""
    request.node.user_properties.append((key, value if isinstance(value, str) else json.dumps(value)))


def send_at_end(config: pytest.Config, key: str, value: Any) -> None:
    """A worker: ``value`` to the controller when the worker finishes."""
    config.workeroutput[key] = value  # type: ignore[attr-defined]


def send_plan(config: pytest.Config, facts: Mapping[str, Facts]) -> None:
    """A worker, once it collected: what the controller's scheduler needs of each test, by node id."""
    folder = config.workerinput.get(PLAN_DIR)  # type: ignore[attr-defined]
    if folder and Path(folder).is_dir():
        worker = config.workerinput["workerid"]  # type: ignore[attr-defined]
        write_atomic(Path(folder) / f"{worker}.json", json.dumps({k: asdict(v) for k, v in facts.items()}))


def read_plan(folder: Path, worker: str) -> dict[str, Facts] | None:
    """The controller: what ``worker`` sent of its collection (None where it sent nothing: a remote worker)."""
    try:
        data = json.loads((folder / f"{worker}.json").read_text())
        return {nodeid: Facts(**value) for nodeid, value in data.items()}
    except (OSError, ValueError, TypeError):
        return None


@dataclass
class Track:
    """One worker's share of the run, as the controller saw it (times: ``time.time()``)."""

    cases: int = 0
    cases_s: float = 0.0
    first: float | None = None
    last: float | None = None
    ready: float | None = None
    died: str = ""
    started: float | None = None  # its process's start (it says at its end)


@dataclass
class Tracks:
    """Every worker's :class:`Track`, and what the workers collected (whether tests never ran is the history's
    tally: :func:`~.workers.cut_short`)."""

    workers: dict[str, Track] = field(default_factory=dict)
    collected: int = 0  # tests
    cases_collected: int | None = None  # attention cases among them (the plan's facts say which)

    def of(self, worker: str) -> Track:
        return self.workers.setdefault(worker, Track())


def worker_id(node: Any) -> str:
    return str(getattr(getattr(node, "gateway", None), "id", "") or getattr(node, "workerinput", {}).get("workerid"))


class Collector:
    """On the controller: each worker report's items into this session (records, skips, A/B outcomes), and each
    worker's share of the run (:attr:`tracks`)."""

    NAME = "pytest-attn-collector"

    def __init__(self, config: pytest.Config, crash_note: Any = None) -> None:
        self.config = config
        self.tracks = Tracks()
        self.crash_note = crash_note or (lambda worker: "")  # where a worker ran, for its crash report

    @pytest.hookimpl(optionalhook=True)
    def pytest_xdist_node_collection_finished(self, node: Any, ids: Sequence[str]) -> None:
        self.tracks.of(worker_id(node)).ready = time.time()
        self.tracks.collected = max(self.tracks.collected, len(ids))

    @pytest.hookimpl(optionalhook=True)
    def pytest_handlecrashitem(self, crashitem: str, report: pytest.TestReport, sched: Any) -> None:
        """A worker died while running ``crashitem``: its failure says where it ran and what happens next."""
        worker = worker_id(getattr(report, "node", None))
        self.tracks.of(worker).died = f"died while running {crashitem}"
        where = self.crash_note(worker)
        report.longrepr = (f"{report.longrepr}: the worker process{where} ended without a report (a signal such as"
                           " SIGKILL or the out-of-memory killer, os._exit, or a crash in a library: its output"
                           " above may say which). The rest of its problem goes to another worker, and pytest-xdist"
                           f" starts a replacement{' on the same GPU' if where else ''} unless --max-worker-restart"
                           " says otherwise")

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        attn = self.config.stash.get(ATTN_SESSION, None)
        node = getattr(report, "node", None)
        track = self.tracks.of(worker_id(node)) if node is not None else None
        start, stop = getattr(report, "start", 0.0), getattr(report, "stop", 0.0)  # (0 in xdist's crash report)
        if track is not None and start and stop:
            track.first = min(track.first or start, start)
            track.last = max(track.last or stop, stop)
        own: float | None = None  # this case's own time, where it is new to the run
        ab_own: float | None = None
        for key, value in report.user_properties:
            if not isinstance(value, str):
                continue
            if key == RECORD and report.when == "call" and attn is not None:
                record = Record.from_json(json.loads(value))
                if track is not None and record.name not in {r.name for r in attn.results.records}:
                    track.cases += 1
                    own = record.timing.elapsed_s + (record.sustained.phase_s if record.sustained else 0.0)
                attn.results.take(record)
            elif key == SKIP and report.skipped and attn is not None:
                attn.results.skipped(value)
            elif key == FAILED and report.failed and attn is not None:
                attn.results.failed(value)
            elif key == AB_RESULT and report.when == "call":
                result = AbResult.from_json(json.loads(value))
                self.config.stash.setdefault(AB_HANDED, []).append(result)
                # an A/B case's own time is its arms' set-up, pairs and records, not arm A's record (4 x H200: the
                # busy lines read 55 % of a worker's span in cases, 96 % so)
                ab_own = result.prepare_s + result.elapsed_s + result.records_s
            elif key == AB_ARMS and report.when == "call":  # every worker's (the same arms, on its own GPU)
                held = self.config.stash.setdefault(AB_WORKER_LINES, [])
                held.extend(line for line in json.loads(value) if line not in held)
        if track is not None and own is not None:
            track.cases_s += ab_own if ab_own is not None else own


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """On the controller, a worker that finished: its session lines (and shard) and its fuzz reach."""
    output = getattr(node, "workeroutput", {})
    config = node.config
    attn = config.stash.get(ATTN_SESSION, None)
    lines = output.get(SESSION_LINES)
    if attn is not None and lines:
        attn.results.notes.extend(f"{lines['where']}: {line}" for line in lines["lines"] + lines["notes"])
        if lines.get("shard"):  # the workers collected (and sharded); the controller writes the JSON
            config.stash[SHARD] = lines["shard"]
        collector = config.pluginmanager.get_plugin(Collector.NAME)
        if isinstance(collector, Collector) and lines.get("started"):
            collector.tracks.of(worker_id(node)).started = lines["started"]
    reach = output.get(FUZZ_REACH_OUTPUT)
    if reach:
        from ..fuzz.fuzzer import Reach  # (Hypothesis: only where a fuzz suite ran)

        held = config.stash.setdefault(FUZZ_REACH, {})
        for name, direction, data in reach:
            held[(name, direction)] = Reach.from_json(data)
