"""Several processes: pytest-xdist workers, one per GPU, and shards of a run across runners.

* ``-n N`` / ``-n auto`` (pytest-xdist) in an attention run: worker ``gwI`` is pinned to the ``I``-th GPU
  this run may use -- the UUIDs NVML lists in the order of an outer ``CUDA_VISIBLE_DEVICES`` -- by
  setting ``CUDA_VISIBLE_DEVICES`` to that UUID before anything in the worker touches CUDA (a replacement for a
  worker that died takes its GPU: :class:`Seats`). ``-n auto`` means one worker per visible GPU; more workers
  than GPUs stop the run at start-up. :mod:`.scheduling` hands the problems out whole (a problem's back ends on
  one GPU, so "vs best" compares results of one GPU; but one too long to keep whole goes case by case), longest
  first, from what each worker wrote of its collection (:func:`pytest_collection_finish`). Without a GPU,
  ``-n N`` runs the CPU profile in N processes.
* Each worker measures as one process would and hands every result record to the controller in its test
  report (``user_properties``), with its session lines (ceilings, compile phase) at the end; the
  controller's session then holds the records of all workers, and the summary, pytest-benchmark's JSON,
  reports, plots and gate come from them as in a single-process run. The summary says how busy each worker was
  (:func:`busy_lines`), and where xdist ended the run with tests never run (:func:`cut_short`).
* ``--attn-shard=I/N`` keeps the I-th of N shares of the problems, balanced by their expected cost (whole
  problems: their back ends stay together; :mod:`.sharding`), for runners that each run one; ``pytest-attn
  merge`` combines their JSON.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import re
import shutil
import sys
import tempfile
import time
from collections.abc import Mapping, MutableMapping, Sequence
from pathlib import Path
from typing import Any

import pytest

from ..core import schedule
from ..core.files import write_atomic
from ..core.schedule import Busy, Facts, case_facts
from ..engine.nvml import visible_devices
from ..engine.probe import process_age_s
from ..verdicts.merge import NOTHING
from .benchjson import run_json
from .handover import GPUS, PLAN_DIR, SEAT, SESSION_LINES, Collector, send_at_end, send_plan, worker_id
from .options import given
from .scheduling import PLAN_FOLDER
from .session import (
    ATTENTION_RUN,
    ATTN_SESSION,
    PARTIAL,
    PINNED,
    SHARD,
    VISIBLE_GPUS,
    attn_session,
    benchmark_json_path,
    case_of_item,
    options_of,
    prepare_attention_run,
)
from .sharding import share


def is_worker(config: pytest.Config) -> bool:
    return hasattr(config, "workerinput")


def workers_requested(config: pytest.Config) -> int:
    """How many xdist workers the controller will start (0 without xdist)."""
    if is_worker(config) or config.getoption("dist", "no") == "no":
        return 0
    return len(config.getoption("tx", None) or [])


def pin(workerinput: Mapping[str, Any], env: MutableMapping[str, str]) -> tuple[int, str] | None:
    """Point this worker at its GPU: ``CUDA_VISIBLE_DEVICES`` = the UUID of its seat (:class:`Seats`). Pure but
    for ``env``; returns (position, UUID), or None where the controller sent no GPUs."""
    gpus = workerinput.get(GPUS) or []
    if not gpus:
        return None
    number = re.fullmatch(r"gw(\d+)", str(workerinput.get("workerid", "")))
    index = workerinput[SEAT] if SEAT in workerinput else (int(number[1]) if number else None)  # (no seat: gwI's)
    if not isinstance(index, int) or not 0 <= index < len(gpus):
        raise pytest.UsageError(f"worker {workerinput.get('workerid')} has no GPU: {len(gpus)} GPU(s) for the run,"
                                " each held by another worker")
    env["CUDA_VISIBLE_DEVICES"] = gpus[index]
    return index, gpus[index]


class Seats:
    """The controller's record of which GPU each worker holds: ``gwI`` the I-th, and a worker that replaces one
    that died (xdist names it anew: ``gw2`` of two) the GPU the dead one freed."""

    def __init__(self, count: int) -> None:
        self.count = count
        self.held: dict[str, int] = {}
        self.taken: dict[str, int] = {}  # every worker's, the dead ones' too (their failures name it)

    def take(self, worker: str) -> int | None:
        """The GPU place ``worker`` takes, or None where every one is held."""
        match = re.fullmatch(r"gw(\d+)", worker)
        free = [i for i in range(self.count) if i not in self.held.values()]
        wanted = int(match[1]) if match else -1
        seat = wanted if wanted in free else (free[0] if free else None)
        if seat is not None:
            self.held[worker] = self.taken[worker] = seat
        return seat

    def free(self, worker: str) -> None:
        self.held.pop(worker, None)

    def of(self, worker: str) -> int | None:
        """The place ``worker`` took (and still names after it died)."""
        return self.taken.get(worker)


def first_call_share(config: pytest.Config) -> tuple[int, int] | None:
    """A worker pinned to one of the run's GPUs: (its place, how many) -- its share of the compile phase's first
    calls (:func:`~pytest_attn.engine.compile.compile_phase`); None elsewhere (one process makes them all)."""
    pinned = config.stash.get(PINNED, None)
    gpus = config.workerinput.get(GPUS) if is_worker(config) else None  # type: ignore[attr-defined]
    return (pinned[0], len(gpus)) if pinned is not None and gpus and len(gpus) > 1 else None


def _is_attention_suite(config: pytest.Config) -> bool:
    """Before configure: an ``--attn-*`` option, or a loaded conftest that prepares an attention run (not this
    plugin's own package, which holds the function in every session: an unrelated project's ``-n`` was taken for
    an attention run's, its workers counted by GPUs and its tests handed out by pytest-attn)."""
    if given(config):
        return True
    return any(getattr(p, "prepare_attention_run", None) is prepare_attention_run
               and not str(getattr(p, "__name__", "")).startswith("pytest_attn.")
               for p in config.pluginmanager.get_plugins())


@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """In a worker, before its session configures (and long before CUDA starts): take its GPU."""
    if is_worker(config):
        pinned = pin(config.workerinput, os.environ)  # type: ignore[attr-defined]
        if pinned is not None:
            config.stash[PINNED] = pinned
        # --benchmark-compare is the controller's: a worker loading the saved runs would only warn that its
        # machine_info (one GPU, no run yet) differs from theirs
        config.option.benchmark_compare = []


@pytest.hookimpl(hookwrapper=True, optionalhook=True)
def pytest_benchmark_compare_machine_info(config: pytest.Config, compared_benchmark: dict[str, Any]) -> Any:
    """The controller of workers compares saved runs before any worker has probed its GPU, so its
    machine_info has no GPU yet: pytest-benchmark's check leaves the saved run's pytest-attn entries out
    (the history is kept per GPU model, and the gate checks each record's device)."""
    saved = compared_benchmark.get("machine_info")
    if not workers_requested(config) or not isinstance(saved, dict):
        yield
        return
    compared_benchmark["machine_info"] = {k: v for k, v in saved.items() if not k.startswith("attn_")}
    try:
        yield
    finally:
        compared_benchmark["machine_info"] = saved


@pytest.hookimpl(optionalhook=True, tryfirst=True)
def pytest_xdist_auto_num_workers(config: pytest.Config) -> int | None:
    """``-n auto`` in an attention run on a GPU machine: one worker per visible GPU. First: loaded with ``-p``, this
    plugin registers before xdist, whose own answer (the CPU count) then came first -- ``-n auto`` on one H200 asked
    for 32 workers and the run stopped at start-up (docs/several-gpus.md)."""
    if not _is_attention_suite(config):
        return None
    return len(visible_devices()) or None


def check_workers(requested: int, gpus: Sequence[str]) -> str | None:
    """Why ``requested`` workers cannot share ``gpus`` (one worker per GPU), or None. Pure."""
    if gpus and requested > len(gpus):
        return (f"-n {requested} asks for {requested} workers but this run may use {len(gpus)} GPU(s)"
                f" ({', '.join(gpus)}): one worker per GPU, so two never share one. Use -n {len(gpus)} or -n auto")
    return None


def configure_controller(config: pytest.Config) -> None:
    """Start-up checks and choices of the controller of an attention run under xdist."""
    requested = workers_requested(config)
    if not requested:
        return
    gpus = [g.uuid for g in visible_devices()]
    problem = check_workers(requested, gpus)
    if problem:
        raise pytest.UsageError(problem)
    if config.getoption("dist", "no") == "load":  # xdist's default for -n: keep each problem on one GPU
        config.option.dist = "loadgroup"
    config.stash[CONTROLLER_GPUS] = gpus
    config.stash[SEATS] = Seats(len(gpus))
    config.stash[STARTED] = time.time() - (process_age_s() or 0.0)
    config.stash[PLAN_FOLDER] = Path(tempfile.mkdtemp(prefix="pytest-attn-plan-"))
    config.pluginmanager.register(Collector(config, lambda w: _where(config, w, " ")), Collector.NAME)


CONTROLLER_GPUS = pytest.StashKey[list[str]]()
SEATS = pytest.StashKey[Seats]()
STARTED = pytest.StashKey[float]()  # the controller's process start (time.time()): the busy lines count from it


def _where(config: pytest.Config, worker: str, lead: str = "") -> str:
    """"GPU 1 (NVIDIA H200, GPU-...)" for a worker pinned to one; "" without GPUs."""
    gpus = config.stash.get(CONTROLLER_GPUS, [])
    seat = config.stash[SEATS].of(worker) if SEATS in config.stash else None
    if seat is None or seat >= len(gpus):
        return ""
    names = {g.uuid: g.name for g in config.stash.get(VISIBLE_GPUS, [])}
    return f"{lead}on GPU {seat} ({names.get(gpus[seat], '?')}, {gpus[seat]})"


@pytest.hookimpl(optionalhook=True)
def pytest_configure_node(node: Any) -> None:
    """Each worker's input: the GPUs of the run, in order (empty on a machine without one), the place of the one
    it takes, and the folder for its plan."""
    config = node.config
    node.workerinput[GPUS] = config.stash.get(CONTROLLER_GPUS, [])
    if SEATS in config.stash and config.stash[SEATS].count:
        node.workerinput[SEAT] = config.stash[SEATS].take(node.workerinput["workerid"])
    if PLAN_FOLDER in config.stash:
        node.workerinput[PLAN_DIR] = str(config.stash[PLAN_FOLDER])


@pytest.hookimpl(optionalhook=True)
def pytest_testnodedown(node: Any, error: Any) -> None:
    """A worker that died frees its GPU for its replacement."""
    if error and SEATS in node.config.stash:
        node.config.stash[SEATS].free(worker_id(node))


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    folder = config.stash.get(PLAN_FOLDER, None)
    if folder is not None:
        shutil.rmtree(folder, ignore_errors=True)
    if is_worker(config) and config.stash.get(ATTENTION_RUN, False):
        atexit.register(leave)  # registered last, so it runs first when xdist tells the worker to exit


def leave(status: int = 0) -> None:
    """A worker of an attention run (or a second look's child), its results handed over and its session
    unconfigured: leave now, with ``status``. The process that waits for it gains nothing from what the libraries
    do at exit -- torch.compile's pool of compile processes shut down one by one, then the interpreter and CUDA
    torn down: 3-4 s after the last case on 2 x H200 (docs/gpu-validation.md#how-long-it-takes)."""
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()
    os._exit(status)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_finish(session: pytest.Session) -> None:
    """A worker, before it tells the controller what it collected (and before it builds kernels): each test's
    problem, work and back end, for the controller's plan (:mod:`.scheduling`)."""
    config = session.config
    if not is_worker(config) or not config.workerinput.get(PLAN_DIR):  # type: ignore[attr-defined]
        return
    facts = {}
    for item in session.items:
        case = case_of_item(item)
        facts[item.nodeid] = Facts(item.nodeid, item.nodeid) if case is None else \
            case_facts(record_name(item.nodeid, config), case)
    send_plan(config, facts)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A problem's back ends in one xdist group where the worker was given ``--dist=loadgroup`` itself (a worker
    re-reads the command line: with plain ``-n`` its ``--dist`` is ``load``, and :mod:`.scheduling` keeps the
    problems whole from the worker's plan instead), and ``--attn-shard``."""
    cases = [(item, case_of_item(item)) for item in items]
    if is_worker(config) and config.getvalue("loadgroup"):
        for item, case in cases:
            if case is not None:
                item.add_marker(pytest.mark.xdist_group(name=case.group))
    shard = options_of(config).shard
    if shard is None:
        return
    index, count = shard
    named = [(record_name(item.nodeid, config), case) for item, case in cases if case is not None]
    mine, config.stash[SHARD] = share(config, index, count, named)
    keep = [item for item, case in cases if (case.group in mine if case is not None else index == 1)]
    dropped = [item for item in items if item not in keep]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def write_empty_shard(session: pytest.Session) -> None:
    """An attention run asked for ``--benchmark-json`` that measured nothing (every case skipped or failed, or Ctrl-C
    before the first): pytest-benchmark writes no file without a benchmark -- it leaves the one it opened at start-up
    empty, 0 bytes -- and a merge would find a shard missing with no word of why. Write one with an empty
    ``benchmarks`` list, a shard's ``attn_shard`` mark, a cut-short run's partial mark, and what became of its cases
    (the merge says it). In :mod:`.finish`, before pytest-benchmark saves."""
    config = session.config
    attn = config.stash.get(ATTN_SESSION, None)
    shard, path = config.stash.get(SHARD, None), benchmark_json_path(config)
    if is_worker(config) or attn is None or path is None or attn.results.records:
        return
    if shard is None and not attn.attention_tests:  # no attention run: pytest-benchmark's file is its own
        return
    if config.getoption("benchmark_disable", False) or config.option.collectonly:
        return
    collector = _collector(config)
    selected = collector.tracks.collected if collector is not None else \
        sum(1 for item in session.items if case_of_item(item) is not None)
    counted: dict[str, int] = {}
    for reason in attn.results.skips:
        counted[reason] = counted.get(reason, 0) + 1
    run = run_json([], config)
    if shard is not None:
        run["attn_shard"] = shard
    if PARTIAL in config.stash:
        run["attn_partial"] = config.stash[PARTIAL]
    run[NOTHING] = {"selected": selected, "skipped": len(attn.results.skips), "failed": session.testsfailed,
                    "reasons": sorted(counted.items(), key=lambda kv: -kv[1])}
    write_atomic(path, json.dumps(run, indent=2, sort_keys=True))


def record_name(nodeid: str, config: pytest.Config) -> str:
    """The node id without the ``@group`` suffix xdist's loadgroup adds: the benchmark's name is the same
    with and without workers."""
    return nodeid.rsplit("@", 1)[0] if is_worker(config) and config.getvalue("loadgroup") else nodeid


def pytest_sessionstart(session: pytest.Session) -> None:
    """A worker of an attention run: pytest-benchmark's "disabled because xdist is active" does not apply
    (the worker measures; the controller writes pytest-benchmark's JSON)."""
    bs = getattr(session.config, "_benchmarksession", None)
    if is_worker(session.config) and bs is not None and _is_attention_suite(session.config):
        bs.xdist_warning = False


def hand_over_lines(session: pytest.Session) -> None:
    """A worker's session lines (ceilings, compile phase, notes), for the controller to print."""
    config = session.config
    if not is_worker(config) or config.stash.get(ATTN_SESSION, None) is None:
        return
    attn = attn_session(config)
    device = attn.device_if_probed
    pinned = config.stash.get(PINNED, None)
    where = f"{config.workerinput['workerid']}"  # type: ignore[attr-defined]
    if pinned is not None:
        where += f" on GPU {pinned[0]} ({device.name if device else '?'}, {pinned[1]})"
    send_at_end(config, SESSION_LINES, {
        "where": where, "lines": [*attn.ceilings.lines(), *attn.compiled.lines()], "notes": list(attn.results.notes),
        "shard": config.stash.get(SHARD, None), "started": time.time() - (process_age_s() or 0.0)})


XDIST_TALLY = "pytest-attn-xdist-tally"  # plugin.history's XdistTally, registered under this name


def _collector(config: pytest.Config) -> Collector | None:
    plugin = config.pluginmanager.get_plugin(Collector.NAME)
    return plugin if isinstance(plugin, Collector) else None


def busy_lines(config: pytest.Config) -> list[str]:
    """The controller of workers: how busy each worker (GPU) was, and when, for the summary."""
    collector = _collector(config)
    if collector is None or not collector.tracks.workers:
        return []
    start = config.stash.get(STARTED, 0.0)

    def since(t: float | None) -> float | None:
        return None if t is None else t - start

    busy = [Busy(w, _where(config, w).removeprefix("on "), t.cases, t.cases_s, since(t.first), since(t.last),
                 since(t.ready), t.died, since(t.started)) for w, t in sorted(collector.tracks.workers.items())]
    short = cut_short(config)
    return schedule.busy_lines(busy) + ([f"workers: {short}"] if short else [])


def cases_selected(config: pytest.Config) -> int | None:
    """The controller of workers: how many attention cases they collected (from the plan), or None unknown."""
    collector = _collector(config)
    return collector.tracks.cases_collected if collector is not None else None


def cut_short(config: pytest.Config) -> str | None:
    """The controller of workers: "cut short (worker gw1 crashed and was not replaced; 7 of 8 tests never ran)"
    where xdist ended the run with tests never run, else None -- the history's tally says (what the run saves
    is marked partial by it); here for the summary, which names it beside the workers' lines."""
    tally = config.pluginmanager.get_plugin(XDIST_TALLY)
    reason = tally.cut_short() if tally is not None else None
    return reason if isinstance(reason, str) else None
