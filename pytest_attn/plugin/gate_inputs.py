"""What the gate needs from a run before its first case, and from its tests as they end; the gate's hooks
(:mod:`.gate`) call these.

* The stored baseline of the device, read and checked at start-up (:func:`stored_at_start`), by the same rule as
  one named with ``--attn-baseline``; and ``--benchmark-disable`` (timing off) refused where the run needs
  measured cases (:func:`timing_asked`) or a stored baseline would gate it: it used to save and gate nothing,
  exit status 0.
* What the run selected: the node ids it collected (after ``-k``, ``--attn-shard``; on the controller of
  pytest-xdist workers, what they collected), and why each that recorded no result did not (a skip's reason, a
  failure's first line) -- so that a baseline case the run selected and did not measure is MISSING, with why,
  and one it did not select UNSELECTED (:mod:`pytest_attn.verdicts.selection`).
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import pytest

from ..engine import probe
from ..verdicts.baseline import BaselineError, baseline_path, load_baseline
from ..verdicts.fingerprint import Fingerprint
from ..verdicts.selection import Selection
from .hints import in_this_run
from .session import (
    NOT_MEASURED,
    SELECTED,
    STORED_BASELINES,
    VISIBLE_GPUS,
    AttnSession,
    attn_session,
    timing_disabled,
)
from .workers import workers_requested


def _timing_off_by(config: pytest.Config) -> str:
    """``--benchmark-disable`` where it is in force, named with where it came from; "" where it is not."""
    if not timing_disabled(config):
        return ""
    if "--benchmark-disable" in (str(a) for a in config.invocation_params.args):
        return "--benchmark-disable"
    if "--benchmark-disable" in os.environ.get("PYTEST_ADDOPTS", ""):
        return "--benchmark-disable (in PYTEST_ADDOPTS)"
    return f"--benchmark-disable (in the addopts of {config.inipath or 'the ini file'})"


def _timing_off(flag: str, needs: str, check_only: str) -> pytest.UsageError:
    """The error of a run that asks for measured cases with timing off: which option conflicts, and both fixes."""
    override = "remove it" if flag == "--benchmark-disable" else "add --benchmark-enable, which overrides it"
    return pytest.UsageError(
        f"{flag} turns timing off (each case checked and run once, nothing measured), and {needs}: the run would"
        f" save, gate and report nothing, and pass. pytest-attn measures on its own, without pytest-benchmark's"
        f" timing: to measure, {override}; to check the cases without timing them, {check_only}")


def timing_asked(config: pytest.Config, session: AttnSession) -> None:
    """``--benchmark-disable`` with an option that needs measured cases stops the run now (a stored baseline for
    the device does too, once the device is known: :func:`stored_at_start`)."""
    flag = _timing_off_by(config)
    gate_options = session.gate
    asked = [name for name, on in (
        ("--attn-save-baseline", gate_options.save), ("--attn-add-to-baseline", gate_options.add),
        (f"--attn-baseline={gate_options.baseline}", gate_options.baseline not in ("auto", "off")),
        ("--attn-baselines-dir", gate_options.dir_given and gate_options.baseline == "auto"),
        ("--attn-inject-slowdown", session.options.inject_slowdown is not None),
        ("--attn-report", gate_options.report is not None)) if on]
    if flag and asked and session.options.ab is None:  # (an A/B checks both arms under it: plugin.ab)
        raise _timing_off(flag, f"{', '.join(asked)} needs measured cases", f"leave out {', '.join(asked)}")


def gates(config: pytest.Config, session: AttnSession) -> bool:
    """This run reads the stored baseline of its device: to gate against it (``auto``), or to add a repeat."""
    options = session.gate
    quiet = config.option.collectonly or session.options.compile_only or session.options.ab is not None
    return not quiet and not options.save and (options.baseline == "auto" or options.add)


def controller_devices(config: pytest.Config) -> list[Fingerprint]:
    """The device models the workers will measure on, as the controller knows them without touching CUDA:
    NVML's names of the run's GPUs, or this CPU's model."""
    gpus = config.stash.get(VISIBLE_GPUS, [])
    if gpus:
        return list({g.name: Fingerprint(gpu=g.name) for g in gpus}.values())
    return [Fingerprint(gpu=probe.cpu_model(), kind="cpu")]


def stored_at_start(config: pytest.Config, devices: list[Fingerprint]) -> None:
    """The stored baseline of each device this run will be gated against (or add a repeat to), read and checked
    before the first case: a corrupt one stops the run now, as one named with ``--attn-baseline`` does -- not
    after every case was measured. Each is kept for the gate and the timer pins. With ``--benchmark-disable`` a
    stored baseline stops the run too: it would gate nothing."""
    options = attn_session(config).gate
    held = config.stash.setdefault(STORED_BASELINES, {})
    for fp in devices:
        path = baseline_path(options.baselines_dir, fp.key)
        if path in held or not path.exists():
            continue
        flag = _timing_off_by(config)
        if flag:
            raise _timing_off(flag, f"a baseline for {fp.device} is stored at {path}, which gates every run",
                              "run without the gate: --attn-baseline=off")
        try:
            held[path] = load_baseline(path)
        except BaselineError as exc:
            raise pytest.UsageError(
                f"the stored baseline for {fp.device}: {in_this_run(str(exc), config)} (--attn-save-baseline replaces"
                " a corrupt one only with --attn-force). To run without it: --attn-baseline=off") from None


def plain_name(config: pytest.Config, nodeid: str) -> str:
    """A node id as the benchmark's name: without the ``@group`` pytest-xdist's loadgroup adds (see
    :func:`.workers.record_name`)."""
    return nodeid.rsplit("@", 1)[0] if config.getoption("dist", "no") == "loadgroup" else nodeid


def collected(config: pytest.Config, nodeids: Iterable[str]) -> None:
    """Node ids the run collected (a worker's, on the controller: every worker collects them all)."""
    config.stash.setdefault(SELECTED, set()).update(plain_name(config, n) for n in nodeids)


class NotMeasured:
    """Why each test that recorded no result did not (registered in an attention run, on the process that
    gates; on the controller of workers their reports come here too)."""

    def __init__(self, config: pytest.Config) -> None:
        self.config = config

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped or report.failed:
            held = self.config.stash.setdefault(NOT_MEASURED, {})
            held.setdefault(plain_name(self.config, report.nodeid), why_not(report))


def why_not(report: pytest.TestReport) -> str:
    """A skipped or failed test's report in one line: ``skipped: <reason>``, ``failed in setup: <error>``."""
    if report.skipped:
        longrepr = report.longrepr
        reason = str(longrepr[2]) if isinstance(longrepr, tuple) and len(longrepr) == 3 else report.longreprtext
        return f"skipped: {reason.removeprefix('Skipped: ').strip()}"
    crash = getattr(report.longrepr, "reprcrash", None)
    text = str(getattr(crash, "message", "") or report.longreprtext).strip()
    first = text.splitlines()[0] if text else "no message"
    return f"failed{'' if report.when == 'call' else f' in {report.when}'}: {first}"


def selection_of(config: pytest.Config, attn: AttnSession) -> Selection | None:
    """What this run selected, for the gate (None where it is not known)."""
    names = config.stash.get(SELECTED, None)
    if names is None:
        return None
    profile = attn.options.profile
    if profile == "auto":  # (the controller of workers never chose one: its workers did, as this would)
        profile = attn.profile if not workers_requested(config) else \
            "default" if config.stash.get(VISIBLE_GPUS, []) else "cpu"
    why: dict[str, str] = config.stash.get(NOT_MEASURED, {})
    return Selection(frozenset(names), dict(why), tuple(attn.backends), tuple(attn.options.dtypes or ()), profile)
