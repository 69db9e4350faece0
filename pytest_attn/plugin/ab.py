"""``--attn-ab=ARM_A,ARM_B``: the paired A/B run wired into pytest.

Each attention case is measured by the arms' worker processes -- two replicas per arm, started in the order
A1 B1 B2 A2 (:mod:`pytest_attn.engine.ab.processes`) -- taking turns on this process's GPU
(:mod:`pytest_attn.engine.ab.pairing`); the verdict is B against A from
the paired blocks (:mod:`pytest_attn.verdicts.ab.paired`). Arm B's record goes to pytest-benchmark (its
table, JSON, autosave) with the A/B outcome in its ``extra_info`` (``attn_ab``); the session ends with the
A/B table, ``--attn-report`` files (summary.md, results.csv, ab.json), the job summary under GitHub
Actions, and a non-zero exit status for the verdicts ``--attn-fail-on`` names (SLOWER by default). No
stored baseline is read or written. Under pytest-xdist every worker (one per GPU) runs its own arms -- their
processes inherit the worker's ``CUDA_VISIBLE_DEVICES``, so each case's pairs run on that one GPU -- and hands
each outcome (with the worker and its GPU) to the controller in its test report; the controller writes the one
A/B report and exit status of them all. An arm that dies or stops answering fails its case and is replaced
(:mod:`pytest_attn.engine.ab.processes`).
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable
from typing import Any

import pytest

from ..core.case import AttnCase
from ..core.codec import case_from_dict, case_to_dict
from ..core.device import DeviceInfo
from ..core.record import Record
from ..engine.ab.messages import Hello, Release
from ..engine.ab.pairing import PairRule, PairRun, check_pair, run_pair
from ..engine.ab.processes import ArmError, ArmProcess, probe_environment
from ..engine.ab.spec import ArmSpec, builds_lines
from ..engine.ab.waits import DEFAULT_WAITS, ArmWaits
from ..engine.ab.worker import settings_to_json
from ..engine.settings import CaseFailed, CaseSkipped
from ..verdicts.ab.paired import AbResult, Paired, paired
from ..verdicts.ab.summaries import longer, markdown, terminal_lines, write_ab_reports
from ..verdicts.runs import partial_note
from .gate import append_job_summary, write_section
from .handover import AB_ARMS, AB_RESULT, send
from .session import (
    AB_HANDED,
    AB_LINES,
    AB_WORKER_LINES,
    ATTN_SESSION,
    PARTIAL,
    PINNED,
    AttnSession,
    attn_session,
    terminal_say,
)

#: A case still too noisy to decide at twice --attn-max-time goes on to this many times that: stopped at twice,
#: an A/A called power-capped cases FASTER or SLOWER (docs/gpu-validation.md#the-paired-ab).
NOISY_TIMES = 3
#: Worker processes per arm (engine.pairing: where a process sits must cancel out of the verdict).
REPLICAS = 2
REFUSED_WITH = {"attn_save_baseline": "--attn-save-baseline", "attn_add_to_baseline": "--attn-add-to-baseline",
                "attn_inject_slowdown": "--attn-inject-slowdown (slow one arm instead: +slowdown=PCT)"}


class AbRun:
    """The arms of this process and the outcomes of the session (a controller's: its workers')."""

    def __init__(self, specs: tuple[ArmSpec, ArmSpec], threshold: float, fail_on: tuple[str, ...],
                 say: Callable[[str], None] = lambda line: None, waits: ArmWaits = DEFAULT_WAITS,
                 worker: str = "", gpu: str = "") -> None:
        self.specs = specs
        self.say = say  # a line to the terminal now (the arms' builds, once both said hello)
        self.threshold = threshold
        self.fail_on = fail_on
        self.waits = waits  # how long an arm is waited for (--attn-ab-arm-timeout)
        self.worker, self.gpu = worker, gpu  # a pytest-xdist worker's id and the GPU it is pinned to
        self.results: list[AbResult] = []
        self.worker_lines: list[str] = []  # a controller's: the arm lines its workers saw
        self._arms: tuple[list[ArmProcess], list[ArmProcess]] | None = None
        self._said = False

    def arms(self, session: AttnSession) -> tuple[list[ArmProcess], list[ArmProcess]]:
        """Each arm's replicas (A1, A2), (B1, B2). Their processes start together, importing torch and the
        back ends' libraries at once; each is said hello to -- and touches the GPU -- at its first request, so
        in the order the first case asks them: A1 B1 B2 A2."""
        if self._arms is None:
            origins = {o for n in session.backends if (o := session.registry.origin(n))}
            settings = settings_to_json(session.settings)
            self._arms = tuple(  # type: ignore[assignment]
                [ArmProcess(f"{arm}{k + 1}", spec, Hello(settings, sorted(origins), spec.slowdown), self.waits,
                            [*session.backends, *filter(None, [spec.backend])])
                 for k in range(REPLICAS)]
                for arm, spec in zip("AB", self.specs, strict=True))
            for arm in self._all():
                with contextlib.suppress(ArmError):  # said when the first case asks it (and fails that case)
                    arm.spawn()
        assert self._arms is not None
        return self._arms

    def _all(self) -> list[ArmProcess]:
        return [p for replicas in self._arms or () for p in replicas]

    def rule(self, session: AttnSession) -> PairRule:
        limit = session.settings.stop.max_time_s  # --attn-max-time: per arm, so twice that for both arms
        return PairRule(threshold=self.threshold, max_time_s=2 * limit, noisy_time_s=NOISY_TIMES * 2 * limit)

    def measure(self, session: AttnSession, case: AttnCase, label: str) -> tuple[Record, AbResult]:
        """Arm B's record of the case and the case's A/B outcome. Raises CaseSkipped or CaseFailed."""
        a, b = self.arms(session)
        try:
            run = run_pair(self._cases(case), label, a, b, self.rule(session),
                           judge=lambda pairs: judged(label, pairs, self.threshold).settled(self.threshold),
                           waits=self.waits)
        except ArmError as exc:
            self._release_held()
            raise CaseFailed(f"{case.id}: {exc}") from None
        finally:
            self._say_builds()
        record_a, record_b = (Record.from_json(r) for r in run.records)
        record_b = dataclasses.replace(record_b, device=_pinned(record_b.device, session.device))
        result = result_of(label, case, run, record_a, record_b, self.threshold)
        return record_b, dataclasses.replace(result, worker=self.worker, gpu=self.gpu, arm_gpus=self._arm_gpus())

    def check(self, session: AttnSession, case: AttnCase, label: str) -> None:
        """``--benchmark-disable``: both arms set the case up and check it; nothing is timed."""
        try:
            check_pair(self._cases(case), label, *self.arms(session), waits=self.waits)
        except ArmError as exc:
            self._release_held()
            raise CaseFailed(f"{case.id}: {exc}") from None
        finally:
            self._say_builds()

    def _release_held(self) -> None:
        """After an arm failed a case: the replicas still holding it let it go (its memory, for the next case);
        one that cannot is replaced as it fails."""
        for arm in self._all():
            if arm.holds:
                with contextlib.suppress(ArmError):
                    arm.ask(Release(), self.waits.floor_s)

    def _arm_gpus(self) -> dict[str, str]:
        """The GPU each replica's process runs on: its UUID, else the CUDA_VISIBLE_DEVICES it saw."""
        return {arm.label: arm.about.uuid or arm.about.visible or "" for arm in self._all() if arm.about is not None}

    def _say_builds(self) -> None:
        """Once both arms said hello: what they load against each other, before the run goes on (a warning
        that both load one build is worth a stopped run)."""
        if self._said:
            return
        lines = self._builds()
        self._said = bool(lines)
        for line in lines:
            self.say(line)

    def _builds(self) -> list[str]:
        a, b = self._arms if self._arms is not None else ([], [])
        return builds_lines(self.specs, (a[0].about if a else None, b[0].about if b else None))

    def _cases(self, case: AttnCase) -> tuple[dict[str, Any], dict[str, Any]]:
        return self._case_for(case, self.specs[0]), self._case_for(case, self.specs[1])

    @staticmethod
    def _case_for(case: AttnCase, spec: ArmSpec) -> dict[str, Any]:
        data = case_to_dict(case)
        if spec.backend:
            data["backend"] = spec.backend
        try:
            case_from_dict(data)
        except ValueError as exc:
            raise CaseSkipped(f"--attn-ab: the case cannot be handed to the arms: {exc}") from None
        return data

    def lines(self) -> list[str]:
        """What each arm runs; a controller of pytest-xdist workers, which starts no arms, reports its workers'."""
        if self._arms is None and self.worker_lines:
            return list(self.worker_lines)
        out = []
        for label, spec, replicas in zip("AB", self.specs, self._arms or (None, None), strict=True):
            about = replicas[0].about if replicas is not None else None
            seen = (f" -- {about.python}, pytest-attn from {about.pytest_attn}, "
                    + ", ".join(f"{k} {v}" for k, v in about.versions.items())
                    + (f"; SM clock: {about.clock}" if about.clock else "") if about else "")
            out.append(f"{label}: {spec.text}: {spec.describe()}{seen}")
        if self.worker:  # the controller gathers every worker's line
            out.append(f"{self.worker}: its arms' processes on {self.gpu or 'no GPU'}")
        return out + self._builds()

    def close(self) -> None:
        for arm in self._all():
            arm.close()


def _pinned(device: DeviceInfo, mine: DeviceInfo) -> DeviceInfo:
    """The arm's device, with this process's place among the run's GPUs (pytest-xdist pins workers)."""
    return dataclasses.replace(device, host_index=mine.host_index)


def result_of(name: str, case: AttnCase, run: PairRun, a: Record, b: Record, threshold: float) -> AbResult:
    """One case's outcome from its pairs and the arms' records. Pure."""
    throttle = tuple(r.clocks.throttle.describe() if r.clocks.throttle is not None and r.clocks.throttle.throttled
                     else "" for r in (a, b))
    a_mhz, b_mhz = run.clocks()
    replicas = tuple(run.replicas) if len(set(run.replicas)) > 1 else ()
    return AbResult(name, case.id, case.group, case.backend, judged(name, run, threshold),
                    a.median_s, b.median_s, run.stop, run.timer,
                    run.block_samples[-1] if run.block_samples else 0, run.elapsed_s,
                    (throttle[0], throttle[1]), (run.prepared[0].plan, run.prepared[1].plan),
                    (tuple(run.a_s), tuple(run.b_s)), (tuple(a_mhz), tuple(b_mhz)), replicas,
                    prepare_s=run.prepare_s, records_s=run.records_s, places=run.places, replace_s=run.replace_s,
                    no_room=run.no_room)


def judged(name: str, run: PairRun, threshold: float) -> Paired:
    """The paired verdict on a case's pairs so far (the run's stopping rule asks it, the outcome is it). Pure."""
    a_mhz, b_mhz = run.clocks()
    replicas = tuple(run.replicas) if len(set(run.replicas)) > 1 else ()
    return paired(name, run.a_s, run.b_s, threshold, a_mhz, b_mhz, measured=run.clocks_measured,
                  replicas=replicas)


AB_RUN = pytest.StashKey[AbRun]()  # --attn-ab: the A/B run of this process


def ab_run(config: pytest.Config) -> AbRun | None:
    return config.stash.get(AB_RUN, None)


def hand_over(run: AbRun, result: AbResult, request: pytest.FixtureRequest, extra_info: dict[str, Any],
              worker: bool) -> None:
    """The case's outcome: into the benchmark's extra_info, and to the controller from an xdist worker."""
    run.results.append(result)
    extra_info["attn_ab"] = result.to_json()
    if worker:
        send(request, AB_RESULT, result.to_json())
        send(request, AB_ARMS, run.lines())


# ---- hooks ---------------------------------------------------------------------------------------
@pytest.hookimpl(trylast=True)
def pytest_configure(config: pytest.Config) -> None:
    attn = config.stash.get(ATTN_SESSION, None)
    specs = attn.options.ab if attn is not None else None
    if attn is None or specs is None:
        return
    clash = [flag for dest, flag in REFUSED_WITH.items() if config.getoption(dest, None)]
    if clash:
        raise pytest.UsageError(f"--attn-ab compares two arms measured now; it does not go with {', '.join(clash)}")
    _check_arms(config, specs)
    worker = str(getattr(config, "workerinput", {}).get("workerid", ""))
    pinned = config.stash.get(PINNED, None)
    config.stash[AB_RUN] = AbRun(specs, attn.options.ab_threshold, attn.gate.fail_on,
                                 terminal_say(config, "pytest-attn A/B"), ArmWaits(attn.options.ab_arm_timeout_s),
                                 worker, pinned[1] if pinned else "")


def _check_arms(config: pytest.Config, specs: tuple[ArmSpec, ArmSpec]) -> None:
    """Each arm at start-up: its +backend= names a back end, and its environment can run an arm (a Python with
    torch and pytest-attn); otherwise every case would fail in turn."""
    names = config.stash[ATTN_SESSION].registry.names()
    for label, spec in zip("AB", specs, strict=True):
        if spec.backend and spec.backend not in names:
            raise pytest.UsageError(f"--attn-ab: arm {label} ({spec.text}): +backend={spec.backend} is not a back end;"
                                    f" known: {', '.join(names)}")
        if not hasattr(config, "workerinput"):
            why = probe_environment(spec)
            if why:
                raise pytest.UsageError(f"--attn-ab: arm {label} ({spec.text}): {why}. Give a Python environment with"
                                        " torch (and the libraries under test), or a folder to put first on"
                                        " PYTHONPATH")


def finish_ab(session: pytest.Session) -> None:
    """The A/B's arms closed; on the controller, its verdicts, reports and exit status."""
    config = session.config
    run = ab_run(config)
    if run is None:
        return
    run.close()
    if hasattr(config, "workerinput"):
        return
    handed: list[AbResult] = config.stash.get(AB_HANDED, [])  # what pytest-xdist workers measured
    run.results.extend(handed)
    run.worker_lines = run.worker_lines or config.stash.get(AB_WORKER_LINES, [])
    if not run.results:
        return
    lines = terminal_lines(run.results, run.lines(), run.threshold)
    next_step = longer(run.results, attn_session(config).settings.stop.max_time_s)
    if next_step:
        lines.append(f"  next: {next_step}")
    partial = config.stash.get(PARTIAL, None)
    said = partial_note({"attn_partial": partial}) or "" if partial else ""
    if said:
        lines.append(f"  note: a partial run ({said}): the cases it did not reach were not judged")
    try:
        if (folder := attn_session(config).gate.report) is not None:
            lines += [f"  {w}" for w in write_ab_reports(folder, run.results, run.lines(), run.threshold,
                                                         run.fail_on, partial, next_step)]
        append_job_summary(markdown(run.results, run.lines(), run.threshold, run.fail_on, said, next_step))
    except OSError as exc:
        lines.append(f"error: writing the A/B report failed: {exc.strerror or exc} ({exc.filename}); the verdicts"
                     " above stand")
        session.exitstatus = pytest.ExitCode.USAGE_ERROR
    failing = [r for r in run.results if r.paired.verdict in run.fail_on]
    if failing and session.exitstatus == pytest.ExitCode.OK:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    if failing:
        said = "/".join(v for v in run.fail_on if any(r.paired.verdict == v for r in failing))
        lines.append(f"{len(failing)} case(s) {said} in B: the run fails (--attn-fail-on)")
    config.stash[AB_LINES] = lines


def ab_section(terminalreporter: Any, config: pytest.Config) -> None:
    write_section(terminalreporter, "pytest-attn A/B", config.stash.get(AB_LINES, []))


def pytest_unconfigure(config: pytest.Config) -> None:
    run = ab_run(config)
    if run is not None:
        run.close()
