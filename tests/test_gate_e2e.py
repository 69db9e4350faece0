"""The gate end to end on a CPU run, deterministic: a back end whose calls advance a fake clock (the CPU
timer reads it) by a steady 4-6 ms, and an injected slowdown whose calibrated work advances it too. So a
busy machine cannot turn these red or green: the real-time version runs in .ci/run.

Baselines keyed by the CPU model, repeats added, a clean rerun SAME, 5 % injected SLOWER, --attn-fail-on,
a baseline of another device refused, a run that matches nothing failed, and runs cut short marked as
partial and skipped by a bare --benchmark-compare."""

from __future__ import annotations

import dataclasses
import errno
import json
import re
import shutil
from pathlib import Path

import pytest

pytest.importorskip("torch")

from fake_clock_runs import STEADY_CONFTEST, on_the_fake_clock, steady_suite

from pytest_attn.engine import probe

CONFTEST = STEADY_CONFTEST

SUITE = steady_suite()

ARGS = ["-p", "no:cacheprovider", "--attn-profile=cpu", "--attn-backends=steady", "--attn-dtypes=fp32",
        "--attn-directions=fwd", "--attn-max-time=0.05", "--attn-baselines-dir=b"]
KEY = "cpu-test-cpu-9000"


class Run:
    """A run of the suite on the fake clock, in this test's folder: ``run(*flags)``."""

    def __init__(self, pytester, stored: Path) -> None:
        self.pytester, self.stored = pytester, stored

    def __call__(self, *extra, **kwargs):
        return self.pytester.runpytest(*ARGS, *extra, **kwargs)


@pytest.fixture(scope="module")
def stored_baselines(tmp_path_factory) -> Path:
    """Baselines of 1, 2 and 3 repeats, recorded once for this module (on the fake clock every test's would be
    the same) and copied into each test that starts from one."""
    return tmp_path_factory.mktemp("stored-baselines")


@pytest.fixture
def run(pytester, monkeypatch, fake_clock, stored_baselines):
    on_the_fake_clock(monkeypatch, fake_clock)
    monkeypatch.setattr(probe, "cpu_model", lambda: "Test CPU 9000")
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    return Run(pytester, stored_baselines)


def ungated(run):
    """``run`` without the gate: a test of what the end of a run writes, not of verdicts (a run that names its
    baselines folder with no baseline for this device in it fails: it asked for a gate and got none)."""
    return lambda *extra, **kwargs: run("--attn-baseline=off", *extra, **kwargs)


def _baseline(run, pytester, repeats=3):
    """A baseline of ``repeats`` runs in ``b/``: recorded (a save, then repeats added) the first time it is asked
    for in this module, copied from there afterwards. Returns its number of cases."""
    stored = run.stored / str(repeats)
    if not stored.exists():
        have = max((int(p.name) for p in run.stored.iterdir() if int(p.name) < repeats), default=0)
        if have:
            shutil.copytree(run.stored / str(have), pytester.path / "b")
        else:
            saved = run("--attn-save-baseline")
            assert saved.ret == pytest.ExitCode.OK
            count = len(json.loads((pytester.path / "b" / KEY / "baseline.json").read_text())["benchmarks"])
            saved.stdout.fnmatch_lines([f"saved {count} results as the baseline for CPU Test CPU 9000:"
                                        f" *b/{KEY}/baseline.json"])
            shutil.copytree(pytester.path / "b", run.stored / "1")
        count = len(json.loads((pytester.path / "b" / KEY / "baseline.json").read_text())["benchmarks"])
        for more in range(max(have, 1) + 1, repeats + 1):
            added = run("--attn-add-to-baseline")
            added.stdout.fnmatch_lines([f"*(a repeat added to {count} cases)"])
            shutil.copytree(pytester.path / "b", run.stored / str(more))
    else:
        shutil.copytree(stored, pytester.path / "b", dirs_exist_ok=True)
    return len(json.loads((pytester.path / "b" / KEY / "baseline.json").read_text())["benchmarks"])


def test_a_clean_rerun_is_same_and_five_percent_injected_is_slower(run, pytester):
    count = _baseline(run, pytester)
    clean = run()
    assert clean.ret == pytest.ExitCode.OK
    clean.stdout.fnmatch_lines([f"against */b/{KEY}/baseline.json at a 5.0% threshold: {count} SAME",
                                "*between-run noise measured from repeats*"])
    slower = run("--attn-inject-slowdown=5%", "--attn-report=rep")
    assert slower.ret == pytest.ExitCode.TESTS_FAILED
    slower.stdout.fnmatch_lines([f"against */b/{KEY}/baseline.json at a 5.0% threshold: {count} SLOWER",
                                 "  test_attn?steady-*  +5.*%  +-*  SLOWER",
                                 f"failed: {count} SLOWER (--attn-fail-on=slower,timer,missing)"])
    summary = (pytester.path / "rep" / "summary.md").read_text()
    assert summary.startswith(f"### pytest-attn: regression ({count} SLOWER)")
    assert (pytester.path / "rep" / "results.csv").exists()
    loose = run("--attn-inject-slowdown=5%", "--attn-threshold-for=backend:steady=30%")
    assert loose.ret == pytest.ExitCode.OK


def test_without_repeats_the_cpu_noise_is_assumed_and_five_percent_is_not_called(run, pytester):
    count = _baseline(run, pytester, repeats=1)
    slower = run("--attn-inject-slowdown=5%")
    slower.stdout.fnmatch_lines([f"*: {count} AMBIGUOUS",
                                 "*between-run noise assumed 5.0% per run*--attn-add-to-baseline*"])
    assert slower.ret == pytest.ExitCode.OK
    assert run("--attn-inject-slowdown=5%", "--attn-fail-on=slower,ambiguous").ret == pytest.ExitCode.TESTS_FAILED
    assert run("--attn-inject-slowdown=50%").ret == pytest.ExitCode.TESTS_FAILED


def test_an_outlier_repeat_is_refused_when_added_and_cannot_blind_the_gate(run, pytester, monkeypatch):
    count = _baseline(run, pytester, repeats=2)
    monkeypatch.setenv("TIMES_SLOWER", "100")  # one run on a machine gone wrong: every case 100x
    odd = run("--attn-add-to-baseline")
    assert odd.ret == pytest.ExitCode.OK
    odd.stdout.fnmatch_lines([f"*(a repeat added to 0 cases); refused for {count} case(s): their median here is more"
                              " than 2x off the stored repeats'*"])
    ratios = [float(m) for m in re.findall(r"test_\S*steady-tiny\S*: \d\d\d(?:\.\d)? ms, ([\d.]+)x the stored repeats'"
                                           r" median \d\.\d+ ms", odd.stdout.str())]
    assert len(ratios) == count and all(95 <= r <= 105 for r in ratios), ratios  # 99.8-99.9x on a loaded CI machine
    monkeypatch.delenv("TIMES_SLOWER")
    stored = json.loads((pytester.path / "b" / KEY / "baseline.json").read_text())["benchmarks"]
    assert all(len(b["extra_info"]["timing"]["repeats_s"]) == 2 for b in stored)  # as they were
    slower = run("--attn-inject-slowdown=300%")
    assert slower.ret == pytest.ExitCode.TESTS_FAILED
    slower.stdout.fnmatch_lines([f"against */b/{KEY}/baseline.json at a *: {count} SLOWER"])


def test_a_stored_outlier_repeat_is_left_out_of_the_noise(run, pytester):
    """A baseline that holds one 100x repeat already (added by an older version, or by hand): still gated."""
    count = _baseline(run, pytester, repeats=3)
    path = pytester.path / "b" / KEY / "baseline.json"
    data = json.loads(path.read_text())
    first = data["benchmarks"][0]["extra_info"]["timing"]
    first["repeats_s"] = [*first["repeats_s"][:2], first["repeats_s"][2] * 100]
    path.write_text(json.dumps(data))
    slower = run("--attn-inject-slowdown=300%")
    assert slower.ret == pytest.ExitCode.TESTS_FAILED
    slower.stdout.fnmatch_lines([f"against */b/{KEY}/baseline.json at a *: {count} SLOWER"])
    assert run().ret == pytest.ExitCode.OK


def test_missing_cases_fail_when_asked_and_a_run_matching_nothing_fails_when_the_baseline_is_named(run, pytester):
    count = _baseline(run, pytester)
    fewer = run("-k", "tiny-mha")  # the others left out of the selection: UNSELECTED, not MISSING
    fewer.stdout.fnmatch_lines([f"*1 SAME, {count - 1} UNSELECTED*"])
    assert fewer.ret == pytest.ExitCode.OK
    assert run("-k", "tiny-mha", "--attn-fail-on=unselected").ret == pytest.ExitCode.TESTS_FAILED
    pytester.makepyfile(test_other=SUITE)
    shutil.copytree(pytester.path / "b", pytester.path / "baselines")  # the default folder: stored, not named
    stored = [a for a in ARGS if not a.startswith("--attn-baselines-dir")]
    other = pytester.runpytest(*stored, "test_other.py")  # another selection than the stored one's: not gated
    assert other.ret == pytest.ExitCode.OK
    other.stdout.fnmatch_lines([f"NOT GATED: no case of this run is in the baseline */baselines/{KEY}/baseline.json"
                                f" ({count} cases there, {count} here): nothing was compared. *--attn-baseline=*"])
    assert pytester.runpytest(*stored, "test_other.py", "--attn-fail-on=slower,unselected").ret == \
        pytest.ExitCode.TESTS_FAILED
    named_dir = run("test_other.py")  # the folder named with --attn-baselines-dir: a gate asked for must compare
    assert named_dir.ret == pytest.ExitCode.TESTS_FAILED
    named_dir.stdout.fnmatch_lines([f"error: no case of this run is in the baseline */b/{KEY}/baseline.json*"])
    named = run("test_other.py", f"--attn-baseline=b/{KEY}/baseline.json")  # a gate asked for by name must compare
    assert named.ret == pytest.ExitCode.TESTS_FAILED
    named.stdout.fnmatch_lines([f"error: no case of this run is in the baseline b/{KEY}/baseline.json ({count} cases"
                                f" there, {count} here): nothing was compared*"])


def test_a_baseline_of_another_device_is_refused_with_both_names(run, pytester):
    _baseline(run, pytester, repeats=1)
    data = json.loads((pytester.path / "b" / KEY / "baseline.json").read_text())
    data["machine_info"]["attn_fingerprint"].update(gpu="NVIDIA H200", kind="cuda", sm_count=132)
    (pytester.path / "h200.json").write_text(json.dumps(data))
    result = run("--attn-baseline=h200.json")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stdout.fnmatch_lines(["error: baseline h200.json was recorded on NVIDIA H200; this run is on CPU Test CPU"
                                 " 9000 (kind: cuda (baseline) -> cpu (this run)*): not compared*"])
    (pytester.path / "broken.json").write_text("{")
    broken = run("--attn-baseline=broken.json")
    assert broken.ret == pytest.ExitCode.USAGE_ERROR  # at start-up: nothing measured first
    broken.stderr.fnmatch_lines(["*--attn-baseline: baseline broken.json is not valid JSON*"])
    assert "passed" not in broken.stdout.str()
    missing = run("--attn-baseline=nowhere.json")
    missing.stderr.fnmatch_lines(["*--attn-baseline: baseline nowhere.json cannot be read*"])


def test_an_interrupted_run_is_marked_partial_and_a_bare_compare_skips_it(run, pytester, monkeypatch):
    run = ungated(run)
    assert run("--benchmark-autosave").ret == pytest.ExitCode.OK
    monkeypatch.setenv("STOP_HERE", "ctrl-c")
    stopped = run("--benchmark-autosave", "--attn-save-baseline", no_reraise_ctrlc=True)
    assert stopped.ret == pytest.ExitCode.INTERRUPTED
    stopped.stdout.fnmatch_lines(["*--attn-save-baseline: nothing saved: the run was interrupted*",
                                  "this run is partial (interrupted (Ctrl-C or a signal), 2 of * cases measured)*"])
    monkeypatch.delenv("STOP_HERE")
    saved = sorted((pytester.path / ".benchmarks").glob("*/*.json"))
    assert len(saved) == 2
    assert "attn_partial" not in json.loads(saved[0].read_text())
    mark = json.loads(saved[1].read_text())["attn_partial"]
    assert mark["reason"] == "interrupted (Ctrl-C or a signal)" and mark["cases_measured"] == 2
    complete = json.loads(saved[0].read_text())["benchmarks"]
    assert mark["cases_selected"] == len(complete) > 2  # what this device runs: not the 3 cases it skips
    compared = run("--benchmark-compare")
    assert compared.ret == pytest.ExitCode.OK
    compared.stdout.fnmatch_lines([f"--benchmark-compare: the newest saved run {saved[1].stem} is partial"
                                   f" (interrupted (Ctrl-C or a signal), 2 of * cases measured); compared with"
                                   f" {saved[0].stem}, the newest complete one*"])
    named = run("--benchmark-compare=0002")
    named.stdout.fnmatch_lines([f"--benchmark-compare=0002: {saved[1].stem} is a partial run*"])


def test_a_run_stopped_by_x_is_partial_and_one_that_ran_to_its_end_is_not(run, pytester, monkeypatch):
    run = ungated(run)
    monkeypatch.setenv("STOP_HERE", "fail")
    stopped = run("-x", "--benchmark-json=out.json")
    assert stopped.ret == pytest.ExitCode.TESTS_FAILED
    mark = json.loads((pytester.path / "out.json").read_text())["attn_partial"]
    assert mark["reason"].startswith("stopped early (stopping after 1 failures") and mark["cases_measured"] == 2
    failed = run("--benchmark-json=out.json")  # the failure without -x: every case ran
    assert failed.ret == pytest.ExitCode.TESTS_FAILED
    assert "attn_partial" not in json.loads((pytester.path / "out.json").read_text())


def test_a_benchmark_json_path_that_cannot_be_written_stops_the_run_at_start_up(run, pytester):
    run = ungated(run)
    # it used to measure every case, then die on a raw FileNotFoundError with no summary and no autosave
    missing = run("--benchmark-json=nowhere/x.json")
    assert missing.ret == pytest.ExitCode.USAGE_ERROR
    missing.stderr.fnmatch_lines(["*--benchmark-json=nowhere/x.json: the folder nowhere does not exist; create it*"])
    assert "passed" not in missing.stdout.str()
    (pytester.path / "adir").mkdir()
    folder = run("--benchmark-json=adir")
    assert folder.ret == pytest.ExitCode.USAGE_ERROR
    folder.stderr.fnmatch_lines(["*--benchmark-json=adir: that is a folder; give a file path*"])
    assert run("--benchmark-json=out.json").ret == pytest.ExitCode.OK


def test_a_benchmark_json_opened_by_an_older_pytest_benchmark_is_taken_as_it_is(run, pytester):
    """pytest-benchmark <= 5.2 parses --benchmark-json with argparse.FileType("wb"): the option is a file it
    opened (on the GPU machine the start-up check crashed on it with an INTERNALERROR). This one's save
    takes a path, so the run stops short of saving (--benchmark-disable): start-up is what is tested."""
    run = ungated(run)
    import types

    from pytest_attn.plugin.session import benchmark_json_path

    pytester.makeconftest(CONFTEST + '''

import pytest


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    path = config.getoption("benchmark_json", None)
    if path is not None and not hasattr(path, "write"):
        config.option.benchmark_json = open(path, "wb")  # what argparse.FileType("wb") gives
''')
    result = run("--benchmark-json=out.json", "--benchmark-disable")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str() + result.stderr.str()
    with open(pytester.path / "f.json", "wb") as opened:
        for given in (opened, "f.json", pytester.path / "f.json"):
            config = types.SimpleNamespace(getoption=lambda name, default=None, given=given: given)
            assert benchmark_json_path(config).name == "f.json"


class _FullDisk:
    """A file on a disk with 4 KiB left: the first 4 KiB land, then ENOSPC (the file is left cut short)."""

    def __init__(self, path, mode="wb"):
        self.path, self.fh, self.room = str(path), open(path, mode), 4096  # noqa: SIM115 (closed by __exit__)

    def write(self, data):
        self.fh.write(data[: self.room])
        self.fh.flush()
        if len(data) > self.room:
            raise OSError(errno.ENOSPC, "No space left on device", self.path)
        self.room -= len(data)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.fh.close()


def test_a_full_disk_at_the_end_leaves_no_truncated_json_and_exits_4_after_the_summary(run, pytester, monkeypatch):
    run = ungated(run)
    import pathlib

    import pytest_benchmark.session

    plain_open = pathlib.Path.open

    def path_open(self, mode="r", *args, **kwargs):
        if mode == "wb" and self.suffix == ".json" and ".benchmarks" in self.parts:  # pytest-benchmark's autosave
            return _FullDisk(self, mode)
        return plain_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(pytest_benchmark.session, "open", _FullDisk, raising=False)  # its --benchmark-json
    monkeypatch.setattr(pathlib.Path, "open", path_open)
    (pytester.path / "out.json").write_text("{}")  # an earlier run's file: overwritten in place, cut short
    full = run("--benchmark-json=out.json", "--benchmark-autosave")
    assert full.ret == pytest.ExitCode.USAGE_ERROR
    full.stdout.fnmatch_lines(["*pytest-attn summary*", "*error: saving the run failed: No space left on device"
                               " (out.json); out.json cut short and removed (no truncated JSON left).*Free space*"])
    assert not (pytester.path / "out.json").exists()
    assert "Traceback" not in full.stdout.str() and "OSError" not in full.stdout.str()
    monkeypatch.setattr(pytest_benchmark.session, "open", open, raising=False)
    only_autosave = run("--benchmark-autosave")
    assert only_autosave.ret == pytest.ExitCode.USAGE_ERROR
    only_autosave.stdout.fnmatch_lines(["*error: saving the run failed: No space left on device (*.benchmarks*0001_*"
                                        ".json); *0001_*.json cut short and removed*"])
    assert not list((pytester.path / ".benchmarks").rglob("*.json"))


def test_an_exception_in_a_hook_at_the_end_still_prints_the_summary(run, pytester):
    run = ungated(run)
    pytester.makeconftest(CONFTEST + '''

def pytest_sessionfinish(session):
    raise RuntimeError("a conftest hook fails")
''')
    broken = run("--benchmark-json=out.json")
    assert broken.ret == pytest.ExitCode.INTERNAL_ERROR
    broken.stdout.fnmatch_lines(["*pytest-attn summary*", "*error: the end of the session failed: RuntimeError: a"
                                 " conftest hook fails. The results above were measured*",
                                 "*raise RuntimeError(\"a conftest hook fails\")*"])
    assert json.loads((pytester.path / "out.json").read_text())["benchmarks"]  # written before the hook failed


def test_a_mistyped_baselines_folder_stops_the_run_at_start_up_and_one_without_this_device_fails(run, pytester):
    """A typo in --attn-baselines-dir used to turn the gate off with exit status 0 (every result NEW). It stops
    the run before anything is measured, naming the path and the fix; a file there likewise. Only
    --attn-save-baseline may create the folder. A named folder without a baseline for this device fails at the
    end (a gate was asked for, and compared nothing)."""
    typo = run("--attn-baselines-dir=baselnes")
    assert typo.ret == pytest.ExitCode.USAGE_ERROR and "passed" not in typo.stdout.str()
    typo.stderr.fnmatch_lines(["*--attn-baselines-dir=*baselnes: no such folder*Check the path; to record the first"
                               " baseline there, run with --attn-save-baseline, which creates it*"])
    (pytester.path / "afile").write_text("")
    afile = run("--attn-baselines-dir=afile")
    assert afile.ret == pytest.ExitCode.USAGE_ERROR
    afile.stderr.fnmatch_lines(["*--attn-baselines-dir=*afile: that is a file, not a folder of baselines*"])
    (pytester.path / "empty").mkdir()
    empty = run("--attn-baselines-dir=empty")
    assert empty.ret == pytest.ExitCode.USAGE_ERROR
    empty.stdout.fnmatch_lines(["*pytest-attn summary*", f"error: --attn-baselines-dir=*empty holds no baseline for"
                                f" CPU Test CPU 9000 (*empty/{KEY}/baseline.json): nothing was compared*"])
    made = run("--attn-baselines-dir=new", "--attn-save-baseline")
    assert made.ret == pytest.ExitCode.OK and (pytester.path / "new" / KEY / "baseline.json").is_file()
    assert run("--attn-baselines-dir=new").ret == pytest.ExitCode.OK  # and now it gates


def test_reports_come_with_a_saved_baseline_or_without_a_gate_and_survive_a_failed_autosave(run, pytester,
                                                                                           monkeypatch):
    """--attn-report beside --attn-save-baseline (or --attn-baseline=off) wrote nothing, silently; and when
    pytest-benchmark's save failed (a full disk) the baseline was not saved either, its gate running after it.
    Now the report has the figures (every result NEW), and the gate, baseline and reports come first."""
    saved = run("--attn-save-baseline", "--attn-report=rep")
    assert saved.ret == pytest.ExitCode.OK
    saved.stdout.fnmatch_lines(["saved * results as the baseline*", "  wrote rep/summary.md",
                                "  wrote rep/results.csv"])
    assert "NEW" in (pytester.path / "rep" / "results.csv").read_text()
    off = ungated(run)("--attn-report=rep-off")
    off.stdout.fnmatch_lines(["  wrote rep-off/summary.md"])
    import pathlib

    plain_open = pathlib.Path.open

    def path_open(self, mode="r", *args, **kwargs):
        if mode == "wb" and ".benchmarks" in self.parts:  # pytest-benchmark's autosave, on a full disk
            return _FullDisk(self, mode)
        return plain_open(self, mode, *args, **kwargs)

    monkeypatch.setattr(pathlib.Path, "open", path_open)
    shutil.rmtree(pytester.path / "b")
    full = run("--attn-save-baseline", "--benchmark-autosave")
    assert full.ret == pytest.ExitCode.USAGE_ERROR
    full.stdout.fnmatch_lines(["saved * results as the baseline*",
                               "*error: saving the run failed: No space left on device (*.benchmarks*_*.json)*"])
    assert (pytester.path / "b" / KEY / "baseline.json").is_file()


def test_a_failed_atomic_write_names_its_file(tmp_path, monkeypatch):
    """A full disk said "No space left on device" and no file: the error names the target."""
    import os

    from pytest_attn.core.files import write_atomic

    def full(fd):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(os, "fsync", full)
    with pytest.raises(OSError) as raised:
        write_atomic(tmp_path / "summary.md", "x")
    assert raised.value.filename == str(tmp_path / "summary.md") and raised.value.errno == errno.ENOSPC
    assert list(tmp_path.iterdir()) == []  # no temporary file left


def test_a_named_baseline_with_a_bad_machine_info_stops_at_start_up(run, pytester):
    """It passed the start-up check and failed only at the end, after every case was measured."""
    _baseline(run, pytester, repeats=1)
    data = json.loads((pytester.path / "b" / KEY / "baseline.json").read_text())
    data["machine_info"]["attn_device"] = "a GPU"
    (pytester.path / "odd.json").write_text(json.dumps(data))
    odd = run("--attn-baseline=odd.json")
    assert odd.ret == pytest.ExitCode.USAGE_ERROR and "passed" not in odd.stdout.str()
    odd.stderr.fnmatch_lines(["*--attn-baseline: baseline odd.json: machine_info.attn_device is 'a GPU', not an"
                              " object*"])


def test_one_odd_repeat_of_two_cannot_blind_the_gate(run, pytester):
    """With two stored repeats, one of them 100x off (which one is odd cannot be told), a 300 % slowdown exited 0:
    on a CPU the largest spread of any case is every case's noise. That case is AMBIGUOUS, saying why; the
    others are gated as ever."""
    count = _baseline(run, pytester, repeats=2)
    path = pytester.path / "b" / KEY / "baseline.json"
    data = json.loads(path.read_text())
    first = data["benchmarks"][0]
    timing = first["extra_info"]["timing"]
    timing["repeats_s"] = [timing["repeats_s"][0], timing["repeats_s"][1] * 100]
    first["stats"]["median"] = sum(timing["repeats_s"]) / 2  # what add-to-baseline stores: their median
    path.write_text(json.dumps(data))
    slower = run("--attn-inject-slowdown=300%")
    assert slower.ret == pytest.ExitCode.TESTS_FAILED
    slower.stdout.fnmatch_lines([f"against */b/{KEY}/baseline.json at a *: {count - 1} SLOWER, 1 AMBIGUOUS",
                                 "  test_*: its two stored repeats are 100x apart*add a third*"])


def test_a_bad_benchmark_storage_stops_the_run_at_start_up(run, pytester):
    """It was found only after every case was measured, and the advice blamed free space."""
    (pytester.path / "afile").write_text("")
    bad = ungated(run)("--benchmark-autosave", "--benchmark-storage=file://afile/runs")
    assert bad.ret == pytest.ExitCode.USAGE_ERROR and "passed" not in bad.stdout.str()
    bad.stderr.fnmatch_lines(["*--benchmark-storage=file://afile/runs: afile is a file, so the run cannot be saved"
                              " under it; give a folder*"])
    assert ungated(run)("--benchmark-autosave", "--benchmark-storage=file://new/runs").ret == pytest.ExitCode.OK


def test_a_run_that_measured_nothing_says_why_and_fails_where_it_was_asked_to_save_or_gate(run, pytester):
    """--attn-dtypes=fp16 on the CPU profile, a back end not installed here, an --attn-case in no suite: each
    exited 0 without a word -- in CI a green job that measured nothing."""
    skipped = ungated(run)("--attn-dtypes=bf16")
    assert skipped.ret == pytest.ExitCode.OK
    skipped.stdout.fnmatch_lines(["measured nothing: of the * attention case(s) selected, * skipped (* x *)"])
    none = ungated(run)("--attn-dtypes=bf16", "-k", "nothing-matches-this")
    none.stdout.fnmatch_lines(["measured nothing: no attention case was selected*"])
    asked = run("--attn-dtypes=bf16", "--attn-save-baseline")
    assert asked.ret == pytest.ExitCode.USAGE_ERROR
    asked.stdout.fnmatch_lines(["error: measured nothing: *; the run was asked for --attn-save-baseline*, which needs"
                                " a measured case"])
    assert not (pytester.path / "b").exists() or not list((pytester.path / "b").rglob("baseline.json"))


def test_a_fuzz_run_is_not_told_it_measured_nothing(pytester):
    """A run of one's own fuzz tests (attn_fuzzer, no benchmark) ended "measured nothing: no attention case was
    selected", as if a benchmark had been lost."""
    pytester.makepyfile(test_fuzz_mine="""
import pytest


@pytest.mark.parametrize("direction", ["fwd"])
def test_right(attn_fuzzer, direction):
    attn_fuzzer.run("sdpa-math", direction)
""")
    result = pytester.runpytest("-p", "no:cacheprovider", "--attn-fuzz-examples=5")
    assert result.ret == pytest.ExitCode.OK
    assert "measured nothing" not in result.stdout.str()
    result.stdout.fnmatch_lines(["*sdpa-math fwd: * ran*"])


def test_a_second_look_gates_the_doubtful_cases_on_both_runs_and_the_json_keeps_the_pair(run, pytester, monkeypatch):
    from pytest_attn.plugin import second_look

    count = _baseline(run, pytester, repeats=1)  # the CPU noise assumed: 5 % injected reads AMBIGUOUS in one run
    asked: list[list[str]] = []

    def again(config, firsts):  # the fresh process, faked: each case measured 1 % slower again
        asked.append([r.name for r in firsts])
        return {r.name: dataclasses.replace(r, timing=dataclasses.replace(r.timing, median_s=r.median_s * 1.01))
                for r in firsts}, []

    monkeypatch.setattr(second_look, "look_again", again)
    assert run("--attn-inject-slowdown=5%").ret == pytest.ExitCode.OK and asked == []  # auto: on a GPU only
    looked = run("--attn-inject-slowdown=5%", "--attn-second-look=on", "--benchmark-json=run.json", "--attn-report=rep")
    assert len(asked) == 1 and len(asked[0]) == count and looked.ret == pytest.ExitCode.TESTS_FAILED
    # the pairs measured how far a run repeats (1 %), where one run had only the assumed 5 % to go by
    looked.stdout.fnmatch_lines([f"second look: {count} of {count} case(s) the gate would leave AMBIGUOUS or CLOCK"
                                 " measured again in a fresh process*",
                                 f"*: {count} SLOWER", "*between-run noise measured from repeats*",
                                 f"second look: on both runs, the {count} case(s) measured again read {count} SLOWER"])
    assert f"second look: on both runs, the {count} case(s)" in (pytester.path / "rep" / "summary.md").read_text()
    saved = json.loads((pytester.path / "run.json").read_text())["benchmarks"]
    pairs = [b["extra_info"]["timing"]["repeats_s"] for b in saved if b["extra_info"]["timing"].get("repeats_s")]
    assert len(pairs) == len(asked[0]) and all(p[1] == pytest.approx(p[0] * 1.01) for p in pairs)
    assert run("--attn-inject-slowdown=5%", "--attn-second-look=on", "--attn-add-to-baseline").ret == 0
    assert len(asked) == 1  # a run that saves a baseline gates nothing: nothing to look at again
