"""The end of a run holds: a Ctrl-C during it is noted and the end finishes (a second Ctrl-C included); a step of it
that fails, or a baseline that cannot be saved, never costs the ``--benchmark-json``; a baseline folder that cannot
be written stops the run before the first case; what the run says of a cut-short run is "partial", never "no
regression"; nothing is written through a link planted where the run writes; a pytest-xdist run that lost a worker
is partial; and a process that dies leaves its measured cases to recover.

In-process sessions (pytester) on a fake clock, as tests/test_gate_e2e.py; the two behaviours that need a real
process of their own -- a run that ``abort()``s, a pytest-xdist worker that dies -- start one each (slow)."""

from __future__ import annotations

import errno
import json
import os
import signal
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from factories import record

from pytest_attn.core.files import PROBE_PREFIX, probe_writable
from pytest_attn.verdicts import cli
from pytest_attn.verdicts.baseline import BaselineError, lock_path, save_baseline
from pytest_attn.verdicts.fingerprint import fingerprint_of
from pytest_attn.verdicts.reports import headline, write_reports
from pytest_attn.verdicts.rule import Thresholds, compare
from pytest_attn.verdicts.runs import bench_of

torch = pytest.importorskip("torch")

from fake_clock_runs import steady_conftest, steady_suite  # noqa: E402

from pytest_attn.engine import probe, timers  # noqa: E402
from pytest_attn.plugin import finish, gate  # noqa: E402
from pytest_attn.plugin.history import XdistTally  # noqa: E402

HOOKS = '''
import os
import signal

import pytest


@pytest.hookimpl(trylast=True)
def pytest_sessionfinish(session):
    if os.environ.get("CTRL_C_AT_END"):  # a Ctrl-C right after the last case: during the end of the session
        signal.raise_signal(signal.SIGINT)


def pytest_keyboard_interrupt(excinfo):
    if os.environ.get("CTRL_C_TWICE"):  # the second press of a double Ctrl-C, while pytest handles the first
        signal.raise_signal(signal.SIGINT)
'''
CONFTEST = steady_conftest(ms=1.0) + HOOKS

SUITE = steady_suite()

ARGS = ["-p", "no:cacheprovider", "--attn-profile=cpu", "--attn-backends=steady", "--attn-dtypes=fp32",
        "--attn-directions=fwd", "--attn-max-time=0.2"]
B = "--attn-baselines-dir=b"
KEY = "cpu-test-cpu-9000"


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now

    def advance(self, seconds: float) -> None:
        self.now += seconds


@pytest.fixture
def run(pytester, monkeypatch):
    monkeypatch.setattr(timers, "CPU_CLOCK", Clock())
    monkeypatch.setattr(probe, "cpu_model", lambda: "Test CPU 9000")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    handlers = {s: signal.getsignal(s) for s in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)}

    def session(*extra: str, **kwargs):
        # A Ctrl-C as a terminal delivers it: a test process started in the background (`cmd &` in a script)
        # inherits SIGINT ignored, and the planted one never arrived
        signal.signal(signal.SIGINT, signal.default_int_handler)
        try:
            return pytester.runpytest(*ARGS, *extra, no_reraise_ctrlc=True, **kwargs)
        except KeyboardInterrupt:
            pytest.fail("a Ctrl-C cut the end of the session short: a traceback, and nothing after it ran")
        finally:
            for signum, handler in handlers.items():  # (a session cut short never restored what it installed)
                signal.signal(signum, handler)

    return session


def _saved(pytester) -> dict:
    return json.loads((pytester.path / "out.json").read_text())


def test_a_ctrl_c_during_the_end_is_noted_and_the_end_runs_to_completion(run, pytester, monkeypatch):
    """Ctrl-C right after the last case lost every measured case: no JSON, no baseline, no report, a traceback."""
    monkeypatch.setenv("CTRL_C_AT_END", "1")
    result = run("--benchmark-json=out.json", "--attn-save-baseline", B, "--attn-report=rep")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    saved = _saved(pytester)
    assert saved["benchmarks"] and "attn_partial" not in saved  # every case ran: nothing was cut
    assert json.loads((pytester.path / "b" / KEY / "baseline.json").read_text())["benchmarks"]
    assert (pytester.path / "rep" / "summary.md").is_file()
    assert not (pytester.path / ".pytest-attn").exists()  # the journal of its cases: removed with its folder
    result.stderr.fnmatch_lines(["*pytest-attn: Ctrl-C: the end of the session (gate, saving, summary) finishes first*",
                                 "pytest-attn: Ctrl-C arrived during the end of the session; the end (gate, saving,"
                                 " summary) was finished first, and the run stops now, as interrupted (exit status 2)"])
    assert "Traceback" not in result.stdout.str() + result.stderr.str()


def test_a_double_ctrl_c_saves_what_was_measured_marked_partial(run, pytester, monkeypatch):
    """The second press came while pytest handled the first: the run was saved unmarked (a later bare
    --benchmark-compare took it as whole), with a traceback, and its summary.md said "no regression"."""
    monkeypatch.setenv("STOP_HERE", "ctrl-c")
    monkeypatch.setenv("CTRL_C_TWICE", "1")
    result = run("--benchmark-json=out.json", "--attn-report=rep", "--attn-baseline=off")
    assert result.ret == pytest.ExitCode.INTERRUPTED
    mark = _saved(pytester)["attn_partial"]
    assert mark["reason"] == "interrupted (Ctrl-C or a signal)" and mark["cases_measured"] < mark["cases_selected"]
    said = f"interrupted after {mark['cases_measured']} of {mark['cases_selected']} cases: partial"
    summary = (pytester.path / "rep" / "summary.md").read_text()
    assert summary.startswith(f"### pytest-attn: {said}") and "no regression" not in summary
    result.stdout.fnmatch_lines([f"{said}: the verdicts below are of the cases measured before the cut"])


def test_a_cut_short_runs_headline_says_so_and_never_no_regression():
    base = {"s::a": bench_of(record("steady", 1e-3, test="s::a"))}
    (same,) = compare(base, {"s::a": bench_of(record("steady", 1e-3, test="s::a"))}, Thresholds())
    (slower,) = compare(base, {"s::a": bench_of(record("steady", 2e-3, test="s::a"))}, Thresholds())
    cut = "interrupted after 12 of 40 cases: partial"
    assert (headline([same]), headline([same], partial=cut)) == ("no regression in 1 of 1 cases", cut)
    assert headline([slower], partial=cut) == f"{cut}; regression"


@pytest.mark.parametrize("what", ["folder", "file"])
def test_a_baseline_that_cannot_be_written_stops_the_run_before_the_first_case(run, pytester, monkeypatch, what):
    """A read-only device folder passed start-up; every case was measured, then --attn-add-to-baseline died in a
    traceback and the --benchmark-json was never written."""
    assert run("--attn-save-baseline", B, "-k", "tiny-mha").ret == pytest.ExitCode.OK
    device = pytester.path / "b" / KEY
    if what == "folder":  # a read-only mount: nothing can be created there
        writable = gate.probe_writable

        def read_only(folder: Path) -> None:
            if Path(folder).resolve() == device.resolve():
                raise OSError(errno.EROFS, "Read-only file system", str(folder))
            writable(folder)

        monkeypatch.setattr(gate, "probe_writable", read_only)
        says = f"*--attn-add-to-baseline: cannot write in {device} (Read-only file system)*"
    else:  # a read-only baseline (these tests may run as root, whom a file's mode does not stop)
        access = os.access
        monkeypatch.setattr(os, "access", lambda p, mode, **kw: Path(p) != device / "baseline.json" and
                            access(p, mode, **kw))
        says = f"*--attn-add-to-baseline: the baseline {device / 'baseline.json'} is read-only*"
    result = run("--attn-add-to-baseline", B, "--benchmark-json=out.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines([says])
    assert "passed" not in result.stdout.str()  # before the first case


def test_a_baseline_that_cannot_be_saved_at_the_end_costs_not_the_json(run, pytester, monkeypatch):
    def refused(path: Path, *args, **kwargs) -> str:
        raise PermissionError(errno.EROFS, "Read-only file system", str(path.parent))

    monkeypatch.setattr(gate, "save_baseline", refused)
    result = run("--attn-save-baseline", B, "--benchmark-json=out.json", "-k", "tiny-mha")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines([f"error: --attn-save-baseline: nothing saved: cannot write *b/{KEY} (Read-only"
                                 " file system); the baseline there is as it was, and the run's own JSON is saved as"
                                 " asked*"])
    assert "Traceback" not in result.stdout.str()
    assert len(_saved(pytester)["benchmarks"]) == 1


def test_a_step_of_the_end_that_fails_costs_not_the_json(run, pytester, monkeypatch):
    def broken(session: pytest.Session) -> None:
        raise RuntimeError("a bug in the gate")

    monkeypatch.setattr(finish, "gate_session", broken)
    result = run("--benchmark-json=out.json", "-k", "tiny-mha")
    assert result.ret == pytest.ExitCode.INTERNAL_ERROR
    result.stdout.fnmatch_lines(["error: the end of the session failed in broken: RuntimeError: a bug in the gate. The"
                                 " steps after it, and pytest-benchmark's saving, still ran. The traceback:"])
    assert len(_saved(pytester)["benchmarks"]) == 1


# ---- links planted where the run writes -----------------------------------------------------------------------
def _planted(folder: Path, names: list[str], target: Path) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for name in names:
        (folder / name).symlink_to(target)


def test_the_write_probe_never_opens_a_name_planted_in_the_folder(tmp_path):
    """The probe was ``.pytest-attn-write-test``, written through a link planted there: it emptied the target."""
    target = tmp_path / "precious"
    target.write_text("keep me")
    _planted(tmp_path / "rep", [PROBE_PREFIX], target)
    gate.writable_dir(tmp_path / "rep", "--attn-report")
    probe_writable(tmp_path / "rep")
    assert target.read_text() == "keep me"
    assert [p.name for p in (tmp_path / "rep").iterdir()] == [PROBE_PREFIX]  # the probe's own file removed


def test_reports_and_plots_replace_a_planted_link_and_leave_its_target_alone(tmp_path):
    pytest.importorskip("matplotlib")
    target = tmp_path / "precious"
    target.write_text("keep me")
    names = ["summary.md", "results.csv", "tflops_vs_seqlen.png", "roofline.png"]
    _planted(tmp_path / "rep", names, target)
    records = [record("flash-attn", 1e-3, test="s::a")]
    written = write_reports(tmp_path / "rep", [], "none", records)
    assert [w.rsplit("/", 1)[-1] for w in written] == names
    assert target.read_text() == "keep me"
    assert all((tmp_path / "rep" / n).is_file() and not (tmp_path / "rep" / n).is_symlink() for n in names)


def test_a_baseline_is_never_saved_through_a_planted_link(tmp_path, monkeypatch):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))  # where the save's lock lives (lock_path)
    target = tmp_path / "precious"
    target.write_text("keep me")
    r = record("flash-attn", 1e-3, test="s::a")
    run_json = {"benchmarks": [{"name": "a", "fullname": "s::a", "stats": {"median": 1e-3}, "extra_info": r.to_json()}]}
    folder = tmp_path / "b" / "nvidia-h200"
    lock = lock_path(folder / "baseline.json")
    _planted(lock.parent, [lock.name], target)
    with pytest.raises(BaselineError, match=r"pytest-attn-baseline-\w+\.lock is a symbolic link"):
        save_baseline(folder / "baseline.json", run_json, fingerprint_of(r.device))
    lock.unlink()
    _planted(folder, ["baseline.json", "baseline.json.lock"], target)  # beside it, the lock is no longer opened
    save_baseline(folder / "baseline.json", run_json, fingerprint_of(r.device), force=True)
    assert target.read_text() == "keep me" and not (folder / "baseline.json").is_symlink()


# ---- pytest-xdist ---------------------------------------------------------------------------------------------
def test_a_worker_lost_leaves_tests_never_run_and_says_which():
    tally = XdistTally()
    tally.pytest_xdist_node_collection_finished(None, [f"t{i}" for i in range(20)])
    tally.pytest_xdist_node_collection_finished(None, [f"t{i}" for i in range(20)])
    for i in range(20):
        tally.pytest_runtest_logreport(pytest.TestReport(f"t{i}", ("f", 0, "t"), {}, "passed", None, "call"))
    assert tally.cut_short() is None  # every test reported (a crashed worker replaced: its case is a failure)
    tally.reported = {f"t{i}" for i in range(4)}
    tally.pytest_testnodedown(type("Node", (), {"gateway": type("Gw", (), {"id": "gw1"})()})(), "crashed")
    assert tally.cut_short() == "cut short (worker gw1 crashed and was not replaced; 16 of 20 tests never ran)"


@pytest.mark.slow  # a pytest-xdist worker: a process of its own
def test_a_run_that_lost_its_xdist_worker_is_saved_marked_partial(pytester, monkeypatch):
    """Under -n 2 on a CPU, a worker killed with --max-worker-restart=0 saved 4 of 20 cases unmarked."""
    pytester.makeconftest(steady_conftest(ms=None) + HOOKS)  # the worker reads the real clock
    pytester.makepyfile(test_suite=SUITE)
    monkeypatch.setenv("STOP_HERE", "exit")
    args = [a for a in ARGS if not a.startswith("--attn-max-time")]
    result = pytester.runpytest(*args, "--attn-max-time=0.02", "-n", "1", "--max-worker-restart=0",
                                "--benchmark-json=out.json")
    mark = _saved(pytester)["attn_partial"]
    assert mark["reason"].startswith("cut short (worker gw0 crashed and was not replaced; "), result.stdout.str()
    assert mark["cases_measured"] == len(_saved(pytester)["benchmarks"]) >= 1


# ---- a process that dies --------------------------------------------------------------------------------------
FAKE_CLOCK = '''
from pytest_attn.engine import probe


class _Clock:
    now = 0.0

    def __call__(self):
        return self.now

    def advance(self, seconds):
        self.now += seconds


timers.CPU_CLOCK = _Clock()
probe.cpu_model = lambda: "Test CPU 9000"
'''


@pytest.mark.slow  # the process that dies must be a real one
def test_cases_measured_before_an_abort_are_recovered_as_a_partial_run(run, pytester, monkeypatch, capsys):
    """A kernel that killed the process (abort() in a library) after 16 measured cases lost all 16."""
    (pytester.path / "conftest.py").write_text(CONFTEST + FAKE_CLOCK)
    env = {**os.environ, "STOP_HERE": "abort", "PYTHONPATH": os.pathsep.join(sys.path)}
    died = subprocess.run([sys.executable, "-m", "pytest", *ARGS, "-q"], cwd=pytester.path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert died.returncode == -signal.SIGABRT, died.stdout + died.stderr
    (journal,) = (pytester.path / ".pytest-attn" / "journals").glob("*.jsonl")
    (pytester.path / "conftest.py").write_text(CONFTEST)
    nxt = run("-k", "tiny-mha", "--attn-baseline=off")  # the next run says so at start-up, with the command
    shown = journal.relative_to(pytester.path)
    nxt.stdout.fnmatch_lines([f"pytest-attn: a run that did not finish (pid * on *) left * measured case(s) in its"
                              f" journal {shown}: recover them as a run (marked partial) with: pytest-attn recover"
                              f" {shown} --json recovered.json -- or remove the file"])
    monkeypatch.chdir(pytester.path)
    assert cli.main(["recover", str(shown), "--json", "recovered.json"]) == cli.OK
    recovered = json.loads((pytester.path / "recovered.json").read_text())
    mark = recovered["attn_partial"]
    assert mark["reason"].startswith("the process died (pid ") and mark["cases_measured"] == len(
        recovered["benchmarks"]) >= 1 and mark["cases_selected"] > mark["cases_measured"]
    assert not journal.exists()
    gated = run("-k", "tiny-mha", "--attn-baseline=recovered.json")  # a gate reads it as any run, marked partial
    assert gated.ret == pytest.ExitCode.OK, gated.stdout.str()
    gated.stdout.fnmatch_lines(["*the baseline is a partial run: the process died (pid *"])
