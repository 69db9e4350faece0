"""``--attn-second-look``: the cases the gate would leave AMBIGUOUS or CLOCK measured again in a fresh process and
gated on both runs -- which cases (pytest_attn.verdicts.in_doubt), what the pair holds, what it buys (simulated), the
run's wiring (the fresh process faked), and the child (a real pytest process) measuring only what it was asked and
writing nothing of its own."""

from __future__ import annotations

import dataclasses
import json
import math
import os
import random
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import ClassVar

import pytest
from factories import CPU, attention_suite, record
from test_reruns import _baseline, _rec, _run

from pytest_attn.core.record import Record
from pytest_attn.plugin import second_look, standby
from pytest_attn.plugin.gate import GIVEN_BASELINE
from pytest_attn.plugin.session import ATTN_SESSION
from pytest_attn.verdicts.in_doubt import AT_LEAST, after_line, chosen, combined
from pytest_attn.verdicts.rule import Comparison, Noise, Thresholds, compare
from pytest_attn.verdicts.runs import bench_of, benches
from pytest_attn.verdicts.verdict import Verdict


def _cmp(name: str, verdict: Verdict, change: float) -> Comparison:
    b = bench_of(_rec(name, 1e-3, "GPU-a"))
    return Comparison(name, verdict, b, b, change=change)


# ---- which cases, and the pair -----------------------------------------------------------------------
def test_the_doubtful_cases_go_largest_slowdown_first_and_at_most_a_quarter_of_the_compared():
    cs = [_cmp("same", Verdict.SAME, 0.0), _cmp("amb", Verdict.AMBIGUOUS, 0.02), _cmp("clock", Verdict.CLOCK, 0.05),
          _cmp("slower", Verdict.SLOWER, 0.06), Comparison("new", Verdict.NEW, None, bench_of(_rec("n", 1e-3, "g")))]
    assert chosen(cs) == (["clock", "amb"], 2)
    many = [_cmp(f"c{i}", Verdict.AMBIGUOUS, i / 1000) for i in range(60)]
    names, doubtful = chosen(many)
    assert doubtful == 60 and len(names) == 15 and names[0] == "c59"  # a quarter of 60
    assert len(chosen(many[:20])[0]) == AT_LEAST


def test_the_pair_is_the_first_record_with_both_medians_as_repeats_of_their_gpus():
    first = _rec("t", 1.00e-3, "GPU-a")
    again = dataclasses.replace(_rec("t", 1.02e-3, "GPU-a"), peers=None)
    pair, why = combined(first, again)
    assert why == "" and pair is not None
    assert pair.timing.repeats_s == (1.00e-3, 1.02e-3) and pair.timing.repeats_gpu == ("GPU-a", "GPU-a")
    assert pair.timing.samples_s == first.timing.samples_s  # the figures stay the first run's
    assert bench_of(pair).median_s == pytest.approx(1.01e-3)  # the gate reads the centre


def test_a_second_run_by_another_timer_or_far_off_is_no_repeat_and_says_why():
    first = _rec("t", 1e-3, "GPU-a")
    other = dataclasses.replace(first, timing=dataclasses.replace(first.timing, timer="cuda-event"))
    assert combined(first, other)[0] is None and "measured again by cuda-event" in combined(first, other)[1]
    far = _rec("t", 4e-3, "GPU-a")
    assert combined(first, far)[0] is None and "too far apart" in combined(first, far)[1]


def test_the_after_line_counts_the_verdicts_of_the_cases_measured_again():
    cs = [_cmp("a", Verdict.SLOWER, 0.05), _cmp("b", Verdict.SLOWER, 0.05), _cmp("c", Verdict.SAME, 0.0)]
    assert after_line(["a", "b"], cs) == "second look: on both runs, the 2 case(s) measured again read 2 SLOWER"


# ---- what it buys, simulated ------------------------------------------------------------------------
def _simulate(shift: float, seed: int, look: bool, cases: int = 150) -> list[str]:
    """A baseline over three GPUs (two repeats each), one run on a fourth slowed by ``shift``; with ``look`` its
    doubtful cases measured again on that GPU and gated on both runs."""
    rng = random.Random(seed)
    gpus, tau, run = ("GPU-a", "GPU-b", "GPU-c"), 0.002, 0.008
    stored, first, again = {}, {}, {}
    for i in range(cases):
        offsets = {g: rng.gauss(0, tau) for g in (*gpus, "GPU-new")}
        stored[f"c{i}"] = {g: [1e-3 * math.exp(offsets[g] + rng.gauss(0, run)) for _ in range(2)] for g in gpus}
        first[f"c{i}"], again[f"c{i}"] = ((1e-3 * math.exp(offsets["GPU-new"] + rng.gauss(0, run)) * (1 + shift),
                                           "GPU-new") for _ in range(2))
    base, one = benches(_baseline(stored)), _run(first)
    verdicts = compare(base, benches(one), Thresholds(), Noise.of(base, benches(one)))
    if not look:
        return [c.verdict for c in verdicts]
    names = set(chosen(verdicts)[0])
    seconds = {b["name"]: Record.from_json(b["extra_info"]) for b in _run(again)["benchmarks"]}
    for b in one["benchmarks"]:
        if b["name"] in names:
            pair = combined(Record.from_json(b["extra_info"]), seconds[b["name"]])[0]
            assert pair is not None
            b["extra_info"] = pair.to_json()
    cur = benches(one)
    return [c.verdict for c in compare(base, cur, Thresholds(), Noise.of(base, cur))]


def test_a_second_look_at_the_doubtful_cases_catches_5_percent_where_one_run_cannot_and_stays_clean():
    # measured: replayed on stored H200 pairs outside the baseline, one run read 191-197 of 206 SLOWER at 5 %, its
    # doubtful cases gated on both runs 197-200; clean runs 0 SLOWER, 0 FASTER (docs/gpu-validation.md)
    one, looked = _simulate(0.05, 1, look=False), _simulate(0.05, 1, look=True)  # 139 and 145 of 150
    assert looked.count("SLOWER") >= 0.95 * len(looked) > one.count("SLOWER") + 0.02 * len(looked)
    for seed in range(3):
        clean = _simulate(0.0, seed, look=True)
        assert clean.count("SLOWER") + clean.count("FASTER") == 0


# ---- the run's side, the fresh process faked --------------------------------------------------------
class FakeChild:
    def __init__(self, code: int = 0, hangs: bool = False) -> None:
        self.code, self.hangs, self.killed = code, hangs, False

    def wait(self, timeout: float | None = None) -> int:
        if self.hangs and not self.killed:
            raise subprocess.TimeoutExpired("pytest", timeout or 0)
        return -9 if self.killed else self.code

    def kill(self) -> None:
        self.killed = True


def _fake(monkeypatch, factor: float, code: int = 0, hangs: bool = False, lines: str = "") -> list[dict]:
    """RUN_CHILD replaced: each child "measures" its cases at ``factor`` x their first median; returns the calls."""
    calls: list[dict] = []

    def run(command, env, cwd, log):
        request = json.loads(Path(env[second_look.ENV]).read_text())
        calls.append({"command": command, "env": env, "request": request})
        log.write(lines.encode())
        if code == 0 and not hangs:
            out = [dataclasses.replace(_rec(n, FIRSTS[n] * factor, env.get("CUDA_VISIBLE_DEVICES", "")),
                                       test=n).to_json() for n in request["pins"]]
            Path(request["out"]).write_text(json.dumps({"records": out}))
        return FakeChild(code, hangs)

    monkeypatch.setattr(second_look, "RUN_CHILD", run)
    monkeypatch.setattr(second_look, "TIMEOUT_START_S", 0.01)
    monkeypatch.setattr(second_look, "TIMEOUT_FACTOR", 0.0)
    return calls


FIRSTS = {"t1": 1e-3, "t2": 2e-3, "t3": 3e-3}


class Config:
    stash: ClassVar[dict] = {}

    class invocation_params:
        args = ("suites/", "-n", "2", "--attn-baseline=b.json")
        dir = "."


def _firsts() -> list[Record]:
    return [dataclasses.replace(_rec(n, s, "GPU-b" if n == "t3" else "GPU-a"), test=n) for n, s in FIRSTS.items()]


def test_each_gpu_s_cases_go_to_a_child_on_that_gpu_with_their_pins_and_come_back(monkeypatch):
    calls = _fake(monkeypatch, 1.01)
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", "/tmp/summary.md")
    again, problems = second_look.look_again(Config, _firsts())  # type: ignore[arg-type]
    assert problems == [] and sorted(again) == ["t1", "t2", "t3"]
    assert again["t3"].median_s == pytest.approx(3.03e-3)
    by_gpu = {c["env"]["CUDA_VISIBLE_DEVICES"]: sorted(c["request"]["pins"]) for c in calls}
    assert by_gpu == {"GPU-a": ["t1", "t2"], "GPU-b": ["t3"]}
    pin = record("fa4", 1e-3).timing.pin
    assert calls[0]["request"]["pins"]["t1"] == [pin.timer, pin.calls_per_sample, pin.input_sets]
    assert calls[0]["command"][1:] == ["-m", "pytest", "suites/", "-n", "2", "--attn-baseline=b.json"]
    assert all("GITHUB_STEP_SUMMARY" not in c["env"] for c in calls)  # the job summary is the run's alone


def test_a_child_that_fails_or_hangs_costs_nothing_but_itself_and_is_named_with_its_last_lines(monkeypatch):
    _fake(monkeypatch, 1.0, code=4, lines="one\nERROR: file or directory not found: suites/\n")
    again, problems = second_look.look_again(Config, _firsts()[:1])  # type: ignore[arg-type]
    assert again == {} and problems[0] == "the fresh process on GPU-a ended badly (exit 4); its last lines:"
    assert problems[-1] == "  ERROR: file or directory not found: suites/"
    _fake(monkeypatch, 1.0, hangs=True)
    again, problems = second_look.look_again(Config, _firsts()[:1])  # type: ignore[arg-type]
    assert again == {} and "ended badly (stopped after" in problems[0]


def test_a_ctrl_c_during_the_session_s_end_stops_the_children_and_the_cases_keep_one_run(monkeypatch):
    from pytest_attn.plugin.signals import SIGNAL_GUARD, SignalsAsInterrupt

    _fake(monkeypatch, 1.0, hangs=True)
    monkeypatch.setattr(second_look, "TIMEOUT_START_S", 3600.0)
    guard = SignalsAsInterrupt()
    guard.during_end.append("Ctrl-C")
    monkeypatch.setattr(Config, "stash", {SIGNAL_GUARD: guard})
    again, problems = second_look.look_again(Config, _firsts()[:1])  # type: ignore[arg-type]
    assert again == {} and problems[0] == "the fresh process on GPU-a ended badly (stopped by Ctrl-C); its last lines:"


def test_a_cpu_child_keeps_the_device_the_run_has():
    env = second_look.child_env(Path("r.json"), "")
    assert "CUDA_VISIBLE_DEVICES" not in env or env["CUDA_VISIBLE_DEVICES"] == __import__("os").environ.get(
        "CUDA_VISIBLE_DEVICES")
    assert env[second_look.ENV] == "r.json" and second_look.child_env(Path("r"), "GPU-x")[
        "CUDA_VISIBLE_DEVICES"] == "GPU-x"


# ---- the child started ahead (pytest_attn.plugin.standby), its process faked ----------------------------------
class FakeAhead:
    """A child started ahead: it "starts up" at once, then reads its pipe when waited for -- a path: it measures as
    ``_fake``'s children do; nothing: it exits measuring nothing."""

    def __init__(self, env: dict, fd: int, factor: float) -> None:
        self.env, self.fd, self.factor, self.code, self.killed, self.read = env, os.dup(fd), factor, None, False, None

    def poll(self) -> int | None:
        return self.code

    def wait(self, timeout: float | None = None) -> int:
        if self.code is None:
            with os.fdopen(self.fd, "rb") as pipe:
                self.read = "" if self.killed else pipe.read().decode()
            if self.read:
                request = json.loads(Path(self.read).read_text())
                gpu = self.env["CUDA_VISIBLE_DEVICES"]
                out = [dataclasses.replace(_rec(n, FIRSTS[n] * self.factor, gpu), test=n).to_json()
                       for n in request["pins"]]
                Path(request["out"]).write_text(json.dumps({"records": out}))
            self.code = -9 if self.killed else 0
        return self.code

    def kill(self) -> None:
        self.killed = True


def _ahead(monkeypatch, factor: float = 1.02) -> list[FakeAhead]:
    started: list[FakeAhead] = []

    def start(command, env, cwd, log, fd):
        started.append(FakeAhead(env, fd, factor))
        return started[-1]

    monkeypatch.setattr(standby, "START", start)
    return started


def _run_with(baseline: dict | None) -> tuple[SimpleNamespace, SimpleNamespace]:
    """A run (its config, its session) that may look again, ``baseline`` gating every device."""
    attn = SimpleNamespace(results=SimpleNamespace(records=[], notes=[]), libraries={},
                           gate=SimpleNamespace(baseline="b.json", baselines_dir=Path("b")))
    attn.results.note = attn.results.notes.append
    config = SimpleNamespace(stash={ATTN_SESSION: attn, GIVEN_BASELINE: baseline},
                             invocation_params=Config.invocation_params)
    return config, attn


def _three_ahead(monkeypatch, factor: float = 1.02) -> tuple[list[FakeAhead], SimpleNamespace, list[Path]]:
    started = _ahead(monkeypatch, factor)
    config = SimpleNamespace(stash={}, invocation_params=Config.invocation_params)
    for gpu in ("GPU-a", "GPU-b", "GPU-c"):
        standby.start(config, gpu, ["pytest"], second_look.child_env("", gpu), second_look.ENV)  # type: ignore[arg-type]
    return started, config, [s.folder for s in standby.started(config).values()]  # type: ignore[arg-type]


def test_a_child_is_started_ahead_once_per_gpu_at_its_first_record_where_a_baseline_gates_it(monkeypatch):
    started = _ahead(monkeypatch)
    config, attn = _run_with({"benchmarks": []})
    ahead = second_look.Ahead(config)  # type: ignore[arg-type]
    for r in _firsts():  # t1, t2 on GPU-a, t3 on GPU-b
        attn.results.records.append(r)
        ahead.pytest_runtest_logreport(None)  # type: ignore[arg-type]
    ahead.pytest_runtest_logreport(None)  # type: ignore[arg-type]
    assert [s.env["CUDA_VISIBLE_DEVICES"] for s in started] == ["GPU-a", "GPU-b"]
    assert all(s.env[second_look.ENV].startswith("fd:") for s in started)
    assert sorted(standby.started(config)) == ["GPU-a", "GPU-b"]  # type: ignore[arg-type]
    standby.close_all(config)  # type: ignore[arg-type]
    assert all(s.killed for s in started) and standby.started(config) == {}  # type: ignore[arg-type]
    nothing = _ahead(monkeypatch)
    config, attn = _run_with(None)  # no baseline for the model: the end will not look, so nothing starts
    attn.results.records += [_firsts()[0], dataclasses.replace(_firsts()[1], device=CPU)]
    second_look.Ahead(config).pytest_runtest_logreport(None)  # type: ignore[arg-type]
    config, attn = _run_with({"benchmarks": []})  # a CPU's cases: its start-up would take the timed cases' CPU
    attn.results.records.append(dataclasses.replace(_firsts()[1], device=CPU))
    second_look.Ahead(config).pytest_runtest_logreport(None)  # type: ignore[arg-type]
    assert nothing == []


def test_a_child_that_cannot_be_started_ahead_is_said_and_left_to_the_end(monkeypatch):
    def start(command, env, cwd, log, fd):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(standby, "START", start)
    config, attn = _run_with({"benchmarks": []})
    attn.results.records.append(_firsts()[0])
    second_look.Ahead(config).pytest_runtest_logreport(None)  # type: ignore[arg-type]
    assert standby.started(config) == {}  # type: ignore[arg-type]
    assert attn.results.notes == ["second look: its process on GPU-a could not be started ahead ([Errno 11] Resource"
                                  " temporarily unavailable); it starts at the end"]


@pytest.mark.parametrize(("args", "ahead"), [
    ([], True), (["--attn-second-look=off"], False), (["--attn-save-baseline"], False),
    (["--attn-add-to-baseline"], False), (["--attn-baseline=off"], False), (["--attn-ab=same,same"], False)])
def test_only_a_run_that_may_look_again_starts_children_ahead(pytester, args, ahead):
    config = pytester.parseconfigure("-p", "pytest_attn.plugin", "--attn-profile=cpu", *args)
    assert (config.pluginmanager.get_plugin("pytest-attn-second-look-ahead") is not None) is ahead


def test_on_the_controller_a_worker_s_first_record_starts_the_child_of_its_gpu(pytester, monkeypatch):
    """Under pytest-xdist the record arrives in a worker's report, taken by the Collector: the child is started on the
    report that brings it, whichever of the two hooks pluggy would call first."""
    from pytest_attn.plugin.handover import RECORD, Collector

    started = _ahead(monkeypatch)
    monkeypatch.setattr(second_look, "baseline_for", lambda *args: ({"benchmarks": []}, "b.json", ""))
    config = pytester.parseconfigure("-p", "pytest_attn.plugin", "--attn-profile=cpu")
    ahead = config.pluginmanager.unregister(name="pytest-attn-second-look-ahead")
    config.pluginmanager.register(Collector(config), Collector.NAME)
    config.pluginmanager.register(ahead, "pytest-attn-second-look-ahead")  # called first, but for trylast
    report = pytest.TestReport("suites/t.py::t1", ("t.py", 1, "t1"), {}, "passed", None, "call",
                               user_properties=[(RECORD, json.dumps(_firsts()[0].to_json()))])
    ours = (Collector.NAME, "pytest-attn-second-look-ahead")
    try:
        for hook in reversed(config.hook.pytest_runtest_logreport.get_hookimpls()):  # pluggy's order of calls
            if hook.plugin_name in ours:
                hook.function(report=report)
        assert [s.env["CUDA_VISIBLE_DEVICES"] for s in started] == ["GPU-a"]
    finally:
        standby.close_all(config)
        config._ensure_unconfigure()


def test_the_end_hands_each_gpu_s_cases_to_its_child_started_ahead_and_closes_the_others(monkeypatch):
    started, config, folders = _three_ahead(monkeypatch)
    fresh = _fake(monkeypatch, 1.05)
    started[1].code = 3  # GPU-b's died starting up: its case goes to a fresh child
    again, problems = second_look.look_again(config, _firsts())  # type: ignore[arg-type]
    assert problems == [] and again["t1"].median_s == pytest.approx(1.02e-3)  # GPU-a's, started ahead
    assert again["t3"].median_s == pytest.approx(3.15e-3)  # GPU-b's, fresh
    assert [c["env"]["CUDA_VISIBLE_DEVICES"] for c in fresh] == ["GPU-b"]
    assert started[0].read and not started[0].killed
    assert not folders[0].exists() and not folders[1].exists() and folders[2].exists()
    second_look.second_look_session(SimpleNamespace(config=config))  # type: ignore[arg-type]  # nothing to look at
    assert started[2].killed and started[2].read == "" and not folders[2].exists()  # GPU-c had nothing in doubt


def test_whatever_ends_the_run_closes_every_child_started_ahead(monkeypatch):
    started, config, folders = _three_ahead(monkeypatch)
    second_look.pytest_unconfigure(config)  # type: ignore[arg-type]  # Ctrl-C, a usage error: unconfigure runs
    assert all(s.killed for s in started) and not any(f.exists() for f in folders)
    started, config, folders = _three_ahead(monkeypatch)
    _fake(monkeypatch, 1.0)

    def full(folder, records):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(second_look, "_request", full)
    with pytest.raises(OSError, match="No space left"):
        second_look.look_again(config, _firsts())  # type: ignore[arg-type]
    assert started[0].killed and not folders[0].exists()  # taken for GPU-a's cases, then the request failed
    second_look.pytest_unconfigure(config)  # type: ignore[arg-type]
    assert all(s.killed for s in started) and not any(f.exists() for f in folders)



@pytest.mark.parametrize("child, status", [(True, 0), (True, 1), (False, 0)])
def test_a_child_leaves_at_once_with_its_exit_status_and_a_run_exits_as_it_would(monkeypatch, child, status):
    """A child's interpreter exit skips the libraries' exit work (the run waits for it); its status is kept."""
    if child:
        monkeypatch.setenv(second_look.ENV, "fd:9")
    else:
        monkeypatch.delenv(second_look.ENV, raising=False)
    handlers: list = []
    left: list[int] = []
    monkeypatch.setattr(second_look.atexit, "register", lambda fn, *args: handlers.append((fn, args)))
    monkeypatch.setattr(second_look, "leave", left.append)
    config = SimpleNamespace(stash=pytest.Stash(), option=SimpleNamespace(basetemp="bt"))
    second_look.pytest_cmdline_main(config)  # type: ignore[arg-type]
    temporary = Path(config.option.basetemp)
    if child:  # its own folder, not pytest's numbered ones, nor the run's --basetemp
        temporary.mkdir()
        assert temporary.parent.name.startswith("pytest-attn-second-look-tmp-")
    session = SimpleNamespace(config=config, exitstatus=0)
    second_look.hand_back(session)  # type: ignore[arg-type]  # the last step of the session's end
    session.exitstatus = pytest.ExitCode(status)  # set after the session's end hooks, as a failing gate does
    second_look.pytest_unconfigure(config)  # type: ignore[arg-type]
    for fn, args in handlers:
        fn(*args)
    assert left == ([status] if child else [])
    assert not temporary.parent.exists() if child else config.option.basetemp == "bt"

# ---- the child, a real pytest process ------------------------------------------------------------------


#: A stand-in for pytest-reportlog: a plugin that opens the file its option names for writing at configure -- a child
#: doing so would truncate the file the run is still writing (as pytest's own ``--log-file`` would); and tests that
#: use ``tmp_path`` (pytest clears ``--basetemp`` when its first test asks for it).
CONFTEST = """
import pytest


@pytest.fixture(autouse=True)
def scratch(tmp_path):
    return tmp_path


def pytest_addoption(parser):
    parser.addoption("--report-log", dest="report_log", default=None)


def pytest_configure(config):
    if config.option.report_log:
        open(config.option.report_log, "w").close()


def pytest_sessionstart(session):  # a library's work at a child's exit, leaving a mark where it ran
    import atexit, os, pathlib

    if os.environ.get("PYTEST_ATTN_SECOND_LOOK"):
        atexit.register(pathlib.Path(str(session.config.rootpath), "exit-work").write_text, "ran")
"""


@pytest.mark.e2e  # it starts pytest in subprocesses
def test_the_child_measures_only_its_cases_and_writes_nothing_but_its_records(pytester, tmp_path, monkeypatch):
    """Started ahead, as the run starts it: it collects, waits for its request on the pipe, measures. A second one,
    whose pipe is closed empty, ends measuring nothing."""
    pytest.importorskip("torch")
    system_tmp = tmp_path / "system-tmp"  # the children's TMPDIR: their temporary files must not outlive them
    system_tmp.mkdir()
    monkeypatch.setenv("TMPDIR", str(system_tmp))
    monkeypatch.setenv("PYTEST_DEBUG_TEMPROOT", str(system_tmp))  # where pytester sends pytest's numbered folders
    pytester.makepyfile(test_suite=attention_suite("prefill"))
    pytester.makeconftest(CONFTEST)
    args = ["-p", "pytest_attn.plugin", "-p", "no:cacheprovider", "--attn-profile=cpu", "--attn-backends=sdpa-math",
            "--attn-dtypes=fp32", "--attn-directions=fwd", "--attn-max-time=0.02", "--benchmark-json=run.json",
            "--attn-report=rep", "--junitxml=j.xml", "--attn-save-baseline", "--attn-baselines-dir=b", "-q",
            "--log-file=run.log", "--report-log=events.jsonl", "--basetemp=bt"]
    (pytester.path / "bt").mkdir()
    (pytester.path / "bt" / "kept").write_text("the run's own temporary files: pytest clears --basetemp at its start")
    run = SimpleNamespace(stash={}, invocation_params=SimpleNamespace(dir=pytester.path))
    for gpu in ("used", "unused"):
        standby.start(run, gpu, [sys.executable, "-m", "pytest", *args], second_look.child_env("", ""),  # type: ignore[arg-type]
                      second_look.ENV)
    used, unused = standby.started(run)["used"], standby.started(run)["unused"]  # type: ignore[arg-type]
    try:
        listed = subprocess.run([sys.executable, "-m", "pytest", *args[:10], "--collect-only", "-q"],
                                cwd=pytester.path, capture_output=True, text=True).stdout
        ids = [line for line in listed.splitlines() if "::test_attn[" in line][:2]
        assert len(ids) == 2, listed
        request = tmp_path / "request.json"
        request.write_text(json.dumps({"pins": {ids[0]: ["cpu", 1, 1], ids[1]: ["cpu", 2, 1]},
                                       "out": str(tmp_path / "records.json")}))
        standby.hand(used, request)
        os.close(unused.pipe)  # type: ignore[arg-type]
        unused.pipe = None
        codes = [used.process.wait(timeout=600), unused.process.wait(timeout=600)]
        logs = [(s.folder / "log.txt").read_text() for s in (used, unused)]
    finally:
        standby.close_all(run)  # type: ignore[arg-type]
    assert codes == [0, 0], logs
    records = [Record.from_json(r) for r in json.loads((tmp_path / "records.json").read_text())["records"]]
    assert sorted(r.name for r in records) == sorted(ids)
    assert "did not need it" in logs[1] and "passed" not in logs[1], logs[1]
    left = sorted(str(p.relative_to(pytester.path)) for p in pytester.path.rglob("*") if p.is_file())
    assert not list(system_tmp.iterdir()), list(system_tmp.iterdir())  # nor pytest's numbered folders
    assert left == ["bt/kept", "conftest.py", "test_suite.py"], left  # no JSON, saved run, report, junit file,
    # baseline, journal, log file or report log; the run's --basetemp left as it was; no exit work: both children left
    # at once (``exit-work``)
