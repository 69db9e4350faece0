"""``--attn-second-look``: before the gate, the cases it would leave AMBIGUOUS or CLOCK measured again in a fresh
pytest process on the GPU that measured them, then gated on both runs (why, and the pure parts:
:mod:`pytest_attn.verdicts.in_doubt`). ``auto`` (the default) looks on a GPU; ``on`` on a CPU too.

* **The run** (one process, or the controller of pytest-xdist workers), after it is marked partial or not and before
  its records are settled (:mod:`.finish`): the gate's verdicts computed once, silently; the doubtful cases of each
  GPU handed to a child on that GPU (``CUDA_VISIBLE_DEVICES`` = its UUID; the children of several GPUs at once); each
  case's second median kept beside its first as a repeat. A child that fails or overruns costs nothing but itself:
  the cases keep their one run, and the gate says so. Not for a run cut short, an A/B, or a run that saves a baseline.
  The child of each GPU is started ahead (:mod:`.standby`), at the first case that GPU measured, and waits for its
  cases with its start-up done; one the end does not need is closed.
* **The child** (:data:`ENV` names its request, or the pipe it comes on): the run's own command line, collecting only
  the named cases, each timed as its first run was (timer, calls per sample, input sets, the checks against the
  reference before and while sampling), without xdist, and writing nothing of its own (no JSON, saved run, report,
  baseline, journal, job summary, log file or other plugins' reports; no clock lock, sustained phase or ncu pass) but
  the records it hands back. Its session done, it leaves at once with its exit status, as a worker does
  (:func:`.workers.leave`): the run waits for it.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import pytest

from ..core.files import write_atomic
from ..core.record import Record, TimerPin
from ..verdicts.decision import by_device, gate
from ..verdicts.fingerprint import fingerprint_of
from ..verdicts.in_doubt import AT_LEAST, chosen, combined
from . import standby
from .gate import SECOND_LOOKED, TIMER_PINS, baseline_for, cut_short
from .gate_inputs import selection_of
from .options import NO_LOCK
from .session import ATTN_SESSION, CPU_THREADS, GATE_LINES, AttnSession, case_of_item, terminal_say
from .signals import SIGNAL_GUARD
from .workers import is_worker, leave

#: The child's request: a JSON file (the cases, their pins, where to write), or ``fd:N`` (:mod:`.standby`).
ENV = "PYTEST_ATTN_SECOND_LOOK"
#: A child gets this many times its cases' first time, plus a start-up allowance, before it is stopped.
TIMEOUT_FACTOR, TIMEOUT_START_S = 4.0, 300.0
LAST_LINES = 8
POLL_S = 1.0  # how often a wait for the children looks for a Ctrl-C or SIGTERM
CHILD_OUT = pytest.StashKey[Path]()  # a child: where it writes its records
CHILD_SESSION = pytest.StashKey[pytest.Session]()  # a child: its session, whose exit status it leaves with
CHILD_TMP = pytest.StashKey[Path]()  # a child: the folder of its temporary files
#: What a child never does, whatever the command line, addopts or PYTEST_ADDOPTS say: (option dest, value). The files
#: the run writes are among them: pytest's ``log_file`` (option or ini) and pytest-reportlog's are opened for writing
#: at configure, so a child's would truncate the run's own while the run writes them (tests/test_second_look.py);
#: pytest-html's, pytest-json-report's and allure's would get the child's few cases; a ``--basetemp`` would be cleared.
CHILD_OFF: tuple[tuple[str, Any], ...] = (
    ("benchmark_json", None), ("benchmark_save", None), ("benchmark_autosave", False), ("benchmark_histogram", None),
    ("benchmark_compare", None), ("benchmark_compare_fail", None), ("benchmark_cprofile_dump", None), ("xmlpath", None),
    ("log_file", os.devnull), ("report_log", None), ("htmlpath", None), ("json_report", False),
    ("allure_report_dir", None), ("basetemp", None),
    ("attn_report", None), ("attn_save_baseline", False), ("attn_add_to_baseline", False), ("attn_baseline", "off"),
    ("attn_lock_clocks", NO_LOCK), ("attn_trace_dir", None), ("attn_hbm", None),
    ("attn_sustained", None), ("attn_second_look", "off"), ("numprocesses", 0), ("dist", "no"), ("tx", []),
    ("lf", False), ("failedfirst", False), ("newfirst", False), ("stepwise", False), ("stepwise_skip", False))


def is_child() -> bool:
    return bool(os.environ.get(ENV))


# ---- the child --------------------------------------------------------------------------------------------------
@pytest.hookimpl(tryfirst=True)
def pytest_cmdline_main(config: pytest.Config) -> None:
    """A child turns off what would write or lock, and xdist, before any plugin configures. Its temporary files go to a
    folder of its own, removed as it leaves: under pytest's numbered folders it would hold a slot of the user's own
    runs, and a lock that only the exit work it skips removes."""
    if is_child():
        for dest, value in CHILD_OFF:
            if hasattr(config.option, dest):
                setattr(config.option, dest, value)
        config.stash[CHILD_TMP] = Path(tempfile.mkdtemp(prefix="pytest-attn-second-look-tmp-"))
        config.option.basetemp = str(config.stash[CHILD_TMP] / "basetemp")


def pytest_configure(config: pytest.Config) -> None:
    """A child: no autosave (an attention run's, set at configure by :func:`.session.prepare_attention_run`), read by
    pytest-benchmark after this. The run: its children started ahead, where it may look again."""
    if is_child():
        config.option.benchmark_autosave = False
        return
    attn = config.stash.get(ATTN_SESSION, None)
    if attn is not None and _may_look(config, attn):
        config.pluginmanager.register(Ahead(config), "pytest-attn-second-look-ahead")


@pytest.hookimpl(trylast=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """A child keeps only the cases it was asked for, each timed as its first run was."""
    if not is_child():
        return
    request = _request_of(config, items)
    config.stash[TIMER_PINS] = {name: TimerPin(*pin) for name, pin in request["pins"].items()}
    config.stash[CHILD_OUT] = Path(request["out"])
    wanted = config.stash[TIMER_PINS].keys()
    kept = [item for item in items if item.nodeid.rsplit("@", 1)[0] in wanted]
    dropped = [item for item in items if item.nodeid.rsplit("@", 1)[0] not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _request_of(config: pytest.Config, items: Sequence[pytest.Item]) -> dict[str, Any]:
    """The request, read once. A child started ahead waits here, its collection done and its back ends' libraries
    imported, for the path to come down its pipe; a pipe closed empty (the run did not need it, or is gone) ends it,
    having measured nothing."""
    value = os.environ[ENV]
    if value.startswith(standby.FD_PREFIX):
        _import_backends(config, items)
        with os.fdopen(int(value.removeprefix(standby.FD_PREFIX)), "rb") as pipe:
            value = os.fsdecode(pipe.read())
        if not value:
            pytest.exit("pytest-attn: the run that started this second look did not need it", returncode=0)
    request: dict[str, Any] = json.loads(Path(value).read_text())
    return request


def _import_backends(config: pytest.Config, items: Sequence[pytest.Item]) -> None:
    """The libraries of the run's back ends, imported (nothing run on the GPU): imported after the request instead, a
    child started ahead still took 7.1 s for three cases on an H200, against 3.3-4.2 s (docs/gpu-validation.md, the
    seventeenth session). One that fails to import says so where its case runs."""
    attn = config.stash.get(ATTN_SESSION, None)
    if attn is None:
        return
    for name in sorted({case.backend for case in map(case_of_item, items) if case is not None}):
        with contextlib.suppress(Exception):
            attn.registry.get(name).available()


def hand_back(session: pytest.Session) -> None:
    """A child hands its records back, every case it measured (:mod:`.finish`), and keeps its session for the exit
    status it leaves with (:func:`pytest_unconfigure`); a pytest-xdist worker gives back the GPU memory its allocator
    keeps, which the controller's second look may need on this GPU while the worker waits to be shut down."""
    attn = session.config.stash.get(ATTN_SESSION, None)
    if is_worker(session.config):
        _free_gpu_memory()
    if not is_child():
        return
    session.config.stash[CHILD_SESSION] = session
    if attn is not None and CHILD_OUT in session.config.stash:
        records = [r.to_json() for r in attn.results.records]
        write_atomic(session.config.stash[CHILD_OUT], json.dumps({"records": records}))


# ---- the run ----------------------------------------------------------------------------------------------------
def _may_look(config: pytest.Config, attn: AttnSession) -> bool:
    """Whether this run may look again at all: what its options and its place (a child, a worker) allow."""
    options = attn.gate
    mode = "off" if is_child() or is_worker(config) else options.second_look
    return not (mode == "off" or options.baseline == "off" or options.save or options.add
                or attn.options.ab is not None)


def _wanted(config: pytest.Config, attn: AttnSession) -> bool:
    if not _may_look(config, attn) or cut_short(config) or not attn.results.records:
        return False
    return attn.gate.second_look == "on" or any(r.device.is_cuda for r in attn.results.records)


class Ahead:
    """The run: at the first case each GPU measured, where a baseline can gate that GPU's model, a second look's child
    started on it ahead of the end (:mod:`.standby`) -- on a GPU only: on a CPU its start-up would take the CPU from
    the cases being timed. Under pytest-xdist the controller's reports bring the workers' records."""

    def __init__(self, config: pytest.Config) -> None:
        self.config, self.seen, self.passed = config, 0, set[str]()

    @pytest.hookimpl(trylast=True)  # after the record is kept: by the case's fixture, or by the workers' Collector
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        attn = self.config.stash.get(ATTN_SESSION, None)
        if attn is None or len(attn.results.records) == self.seen:
            return
        new, self.seen = attn.results.records[self.seen:], len(attn.results.records)
        for r in new:
            gpu = r.device.uuid or ""
            if not r.device.is_cuda or not gpu or gpu in self.passed:
                continue
            self.passed.add(gpu)
            fp = fingerprint_of(r.device, r.clocks.lock, self.config.stash.get(CPU_THREADS, None), attn.libraries)
            if cut_short(self.config) or baseline_for(self.config, attn.gate.baseline, attn.gate.baselines_dir,
                                                       fp)[0] is None:
                continue
            try:
                standby.start(self.config, gpu, child_command(self.config), child_env("", gpu), ENV)
            except Exception as exc:  # no process to spare now (EAGAIN, ENOMEM): the end starts a fresh one, as before
                attn.results.note(f"second look: its process on {gpu} could not be started ahead ({exc}); it starts"
                                  " at the end")


def second_look_session(session: pytest.Session) -> None:
    """The doubtful cases of each device model measured again, their records replaced by the pair (:mod:`.finish`)."""
    config = session.config
    attn = config.stash.get(ATTN_SESSION, None)
    try:
        if attn is not None and _wanted(config, attn):
            _look(config, attn)
    finally:
        standby.close_all(config)  # the GPUs with no case in doubt, or a run that looks at none


@pytest.hookimpl(trylast=True)
def pytest_unconfigure(config: pytest.Config) -> None:
    """No child started ahead outlives the run, whatever ended it. A child leaves at once when its interpreter
    exits, skipping the libraries' own exit work (registered last, its handler runs first)."""
    standby.close_all(config)
    session = config.stash.get(CHILD_SESSION, None)
    if session is not None:
        atexit.register(_leave_child, session)


def _leave_child(session: pytest.Session) -> None:
    shutil.rmtree(session.config.stash[CHILD_TMP], ignore_errors=True)
    leave(int(session.exitstatus))


def _look(config: pytest.Config, attn: AttnSession) -> None:
    lines, looked = config.stash[GATE_LINES], config.stash.setdefault(SECOND_LOOKED, [])
    for fp, records in by_device(attn.results.records, config.stash.get(CPU_THREADS, None), attn.libraries).values():
        base, name, _ = baseline_for(config, attn.gate.baseline, attn.gate.baselines_dir, fp)
        if base is None:
            continue
        outcome = gate(records, base, name, fp, attn.gate.thresholds, attn.gate.fail_on,
                       selection=selection_of(config, attn))
        chosen_names, doubtful = chosen(outcome.comparisons)
        names = set(chosen_names)
        if not names:
            continue
        firsts = [r for r in records if r.name in names]
        say = terminal_say(config)
        say(f"second look: measuring {len(firsts)} case(s) the gate would leave AMBIGUOUS or CLOCK again, in a fresh"
            " process on the GPU that measured each")
        start = time.monotonic()
        again, problems = look_again(config, firsts)
        kept, unmeasured = [], [f.name for f in firsts if f.name not in again]
        for first in (f for f in firsts if f.name in again):
            pair, why = combined(first, again[first.name])
            if pair is not None:
                attn.results.update(pair)
                kept.append(first.name)
            else:
                problems.append(f"{why}: gated on its one run")
        if unmeasured and not problems:  # skipped or failed there: its own lines said why
            problems.append(f"not measured again, gated on their one run: {', '.join(unmeasured)}")
        looked.extend(kept)
        more = f" ({doubtful - len(names)} more in doubt: a second look takes at most {len(names)}, the larger of"\
            f" {AT_LEAST} and a quarter of the cases compared)" if doubtful > len(names) else ""
        lines.append(f"second look: {len(kept)} of {len(firsts)} case(s) the gate would leave AMBIGUOUS or CLOCK"
                     f" measured again in a fresh process ({time.monotonic() - start:.1f} s){more}; each is gated on"
                     " both runs (--attn-second-look=off: on one)")
        lines += [f"  {p}" for p in problems]


def _request(folder: Path, records: Sequence[Record]) -> Path:
    path = folder / "request.json"
    pins = {r.name: [r.timing.timer, r.timing.calls_per_sample, r.timing.input_sets] for r in records}
    path.write_text(json.dumps({"pins": pins, "out": str(folder / "records.json")}))
    return path


def child_env(request: Path | str, gpu: str) -> dict[str, str]:
    """The child's environment: the run's, with its request, on the GPU ``gpu`` (a UUID, or "" for the device the
    run has), and no job summary to append to."""
    env = {k: v for k, v in os.environ.items() if k != "GITHUB_STEP_SUMMARY"}
    env[ENV] = str(request)
    if gpu.startswith(("GPU-", "MIG-")):
        env["CUDA_VISIBLE_DEVICES"] = gpu
    return env


def look_again(config: pytest.Config, firsts: Sequence[Record]) -> tuple[dict[str, Record], list[str]]:
    """``firsts`` measured again: a child per GPU, all at once (the one started ahead on it, or a fresh one). Returns
    the records they wrote, by name, and what went wrong (a child that failed or overran: its last lines)."""
    guard = config.stash.get(SIGNAL_GUARD, None)

    def stopped() -> str:
        return f"stopped by {guard.during_end[0]}" if guard is not None and guard.during_end else ""

    _free_gpu_memory()  # the child needs the memory this process's allocator keeps
    by_gpu: dict[str, list[Record]] = {}
    for r in firsts:
        by_gpu.setdefault(r.device.uuid or "", []).append(r)
    with tempfile.TemporaryDirectory(prefix="pytest-attn-second-look-") as tmp:
        runs: list[tuple[str, Path, Any, Any, float]] = []
        ahead: list[standby.Standby] = []
        try:
            for i, (gpu, records) in enumerate(by_gpu.items()):
                budget = TIMEOUT_START_S + TIMEOUT_FACTOR * sum(r.timing.elapsed_s or 1.0 for r in records)
                waiting = standby.take(config, gpu) if gpu else None
                if waiting is not None:
                    ahead.append(waiting)
                    runs.append((gpu, waiting.folder, waiting.process, waiting.log, budget))
                    standby.hand(waiting, _request(waiting.folder, records))
                    continue
                folder = Path(tmp) / str(i)
                folder.mkdir()
                log = open(folder / "log.txt", "wb")  # noqa: SIM115 (closed below, once the child ended)
                child = RUN_CHILD(child_command(config), child_env(_request(folder, records), gpu),
                                  config.invocation_params.dir, log)
                runs.append((gpu, folder, child, log, budget))
            return _collect(runs, stopped)
        except BaseException:  # a child already started never outlives what went wrong here (a full disk, a signal)
            for _, _, child, log, _ in runs:
                standby.stop(child)
                child.wait()
                log.close()
            raise
        finally:
            for waiting in ahead:
                standby.close(waiting)


def _collect(runs: list[tuple[str, Path, Any, Any, float]], stopped: Callable[[], str]
             ) -> tuple[dict[str, Record], list[str]]:
    """Wait for the children (polled: a Ctrl-C or SIGTERM during the session's end stops them, and the cases keep
    their one run), then read what each wrote."""
    again: dict[str, Record] = {}
    problems: list[str] = []
    start = time.monotonic()
    for gpu, folder, child, log, budget in runs:
        ended: str | None = None
        while ended is None:
            try:
                ended = f"exit {child.wait(timeout=POLL_S)}"
            except subprocess.TimeoutExpired:
                why = stopped() or (f"stopped after {budget:.0f} s" if time.monotonic() - start > budget else "")
                if why:
                    standby.stop(child)
                    child.wait()
                    ended = why
        log.close()
        out = folder / "records.json"
        if out.is_file():
            for info in json.loads(out.read_text())["records"]:
                record = Record.from_json(info)
                again[record.name] = record
        if ended != "exit 0" or not out.is_file():
            tail = (folder / "log.txt").read_text(errors="replace").strip().splitlines()[-LAST_LINES:]
            problems.append(f"the fresh process{' on ' + gpu if gpu else ''} ended badly ({ended}); its last lines:")
            problems += [f"  {line}" for line in tail]
    return again, problems


def _free_gpu_memory() -> None:
    torch = sys.modules.get("torch")
    if torch is not None and torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.empty_cache()


def child_command(config: pytest.Config) -> list[str]:
    """This run's own command line, run again with the interpreter running it."""
    return [sys.executable, "-m", "pytest", *config.invocation_params.args]


def _popen(command: list[str], env: dict[str, str], cwd: Path, log: Any) -> subprocess.Popen[bytes]:
    return subprocess.Popen(command, env=env, cwd=cwd, stdout=log, stderr=subprocess.STDOUT,
                            stdin=subprocess.DEVNULL, start_new_session=True)


#: How a child is started (tests replace it; it returns an object with ``wait(timeout)`` and ``kill()``).
RUN_CHILD = _popen
