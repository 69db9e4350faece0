"""Several processes (pytest_attn.plugin.workers) and merged shards (pytest_attn.verdicts.merge, the
pytest-attn command): one worker per GPU pinned by UUID in the order of an outer CUDA_VISIBLE_DEVICES,
more workers than GPUs refused, whole problems per shard, and every way of running the same selection
giving the same benchmarks and summary rows. GPUs are faked; workers are real processes."""

from __future__ import annotations

import json
import re
import types
from pathlib import Path

import pytest

pytest.importorskip("torch")
pytest.importorskip("xdist")

from factories import attention_suite

from pytest_attn.plugin import workers
from pytest_attn.plugin.handover import GPUS, SEAT
from pytest_attn.plugin.workers import check_workers, pin
from pytest_attn.verdicts.merge import MergeError, merge_runs

UUIDS = ["GPU-aaaa", "GPU-bbbb"]


def test_a_worker_takes_the_gpu_its_number_picks():
    env: dict[str, str] = {"CUDA_VISIBLE_DEVICES": "GPU-bbbb,GPU-aaaa"}
    seats = workers.Seats(2)
    assert pin({"workerid": "gw1", GPUS: ["GPU-bbbb", "GPU-aaaa"], SEAT: seats.take("gw1")}, env) == (1, "GPU-aaaa")
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-aaaa"  # a UUID, never "1" of the whole machine
    assert pin({"workerid": "gw0", GPUS: []}, env) is None  # no GPU: the CPU profile, nothing to pin
    seats.take("gw0")
    with pytest.raises(pytest.UsageError, match="worker gw2 has no GPU: 2 GPU"):
        pin({"workerid": "gw2", GPUS: UUIDS, SEAT: seats.take("gw2")}, {})


def test_more_workers_than_gpus_is_refused_with_the_numbers_and_the_fix():
    assert check_workers(2, UUIDS) is None and check_workers(8, []) is None  # without a GPU: N CPU processes
    assert check_workers(3, UUIDS) == (
        "-n 3 asks for 3 workers but this run may use 2 GPU(s) (GPU-aaaa, GPU-bbbb): one worker per GPU, so two"
        " never share one. Use -n 2 or -n auto")


def test_each_worker_is_told_the_gpus_in_order_and_its_place():
    config = types.SimpleNamespace(stash={workers.CONTROLLER_GPUS: UUIDS, workers.SEATS: workers.Seats(2)})
    node = types.SimpleNamespace(config=config, workerinput={"workerid": "gw1"})
    workers.pytest_configure_node(node)
    assert node.workerinput[GPUS] == UUIDS and node.workerinput[SEAT] == 1


def test_a_record_keeps_its_name_without_the_loadgroup_suffix():
    worker = types.SimpleNamespace(workerinput={}, getvalue=lambda name: True)
    assert workers.record_name("t.py::test[a-g]@g", worker) == "t.py::test[a-g]"
    alone = types.SimpleNamespace(getvalue=lambda name: False)
    assert workers.record_name("t.py::test[a@b]", alone) == "t.py::test[a@b]"


def test_shards_merge_into_one_run_and_must_not_overlap():
    a = {"machine_info": {"attn_device": {"name": "NVIDIA H200", "uuid": "GPU-a"}},
         "benchmarks": [{"fullname": "x", "stats": {"median": 1.0}}]}
    b = {"machine_info": {"attn_device": {"name": "NVIDIA H200", "uuid": "GPU-b"}},
         "benchmarks": [{"fullname": "y", "stats": {"median": 2.0}}], "attn_partial": {"reason": "interrupted"}}
    merged = merge_runs([("a.json", a), ("b.json", b)])
    assert [x["fullname"] for x in merged["benchmarks"]] == ["x", "y"]
    assert [d["uuid"] for d in merged["machine_info"]["attn_devices"]] == ["GPU-a", "GPU-b"]
    assert merged["attn_shards"] == ["a.json", "b.json"] and merged["attn_partial"]["reason"] == "b.json: interrupted"
    with pytest.raises(MergeError, match=r"x is in both a\.json and c\.json: shards must not overlap"):
        merge_runs([("a.json", a), ("c.json", a)])


SUITE = attention_suite()
#: a library's work at a worker's exit (torch.compile's pool shutting down), leaving a mark where it ran
EXIT_WORK = """

def pytest_sessionstart(session):
    import atexit, pathlib

    worker = getattr(session.config, "workerinput", {}).get("workerid")
    if worker:
        atexit.register(pathlib.Path(str(session.config.rootpath), "exit-work-" + worker).write_text, "ran")
"""
CONFTEST = """
import pytest

from pytest_attn.plugin import prepare_attention_run


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    prepare_attention_run(config)
""" + EXIT_WORK
ARGS = ["-p", "no:cacheprovider", "--attn-profile=cpu", "--attn-backends=sdpa-math,sdpa-loop,sdpa-padded",
        "--attn-dtypes=fp32", "--attn-directions=fwd", "--attn-max-time=0.05", "--attn-min-samples=5"]


def _rows(text: str) -> list[str]:
    """The summary's problems and their back ends (names only: times differ run to run)."""
    summary = text.split("pytest-attn summary")[1]
    rows, table = [], False
    for line in summary.splitlines():
        if "GFLOP per call" in line:
            rows.append(line.split(":")[0])
        elif line.strip().startswith("backend"):
            table = True
        elif table and line.startswith("  ") and not line.strip().startswith("mask as"):
            rows.append(line.split()[0])
        else:
            table = False
    return sorted(rows)


@pytest.fixture
def one_process(pytester):
    """The run of one process, in-process (no interpreter to start): the reference the other runs match."""
    pytester.makeconftest(CONFTEST)
    pytester.makepyfile(test_suite=SUITE)
    one = pytester.runpytest(*ARGS, "--benchmark-json=one.json")
    assert one.ret == pytest.ExitCode.OK
    first = json.loads((pytester.path / "one.json").read_text())
    assert len(first["benchmarks"]) >= 6
    return one, {b["fullname"] for b in first["benchmarks"]}


@pytest.mark.e2e  # pytest-xdist: a controller and two workers, each importing torch
def test_two_workers_give_the_same_benchmarks_and_rows_as_one_process(pytester, one_process):
    one, names = one_process
    # --attn-shard=1/1 keeps every problem, and proves a shard's mark travels from the workers (that collect
    # and shard) to the controller (that writes the JSON)
    two = pytester.runpytest_subprocess(*ARGS, "-n", "2", "--attn-shard=1/1", "--benchmark-json=two.json", "-v")
    assert two.ret == pytest.ExitCode.OK
    second = json.loads((pytester.path / "two.json").read_text())
    assert {b["fullname"] for b in second["benchmarks"]} == names
    # each problem whole on one worker (pytest-attn's scheduler; xdist's loadgroup split them: a worker re-parses
    # the command line, where --dist is still "load", so the xdist_group marks were never added)
    workers_of: dict[str, set[str]] = {}
    group = {b["fullname"]: b["group"] for b in second["benchmarks"]}
    for worker, nodeid in re.findall(r"^\[(gw\d)\] \[ *\d+%\] PASSED (\S+)", two.stdout.str(), re.M):
        workers_of.setdefault(group[nodeid], set()).add(worker)
    assert len(workers_of) == len(set(group.values())) and all(len(w) == 1 for w in workers_of.values())
    assert len(set.union(*workers_of.values())) == 2  # both worked
    two.stdout.fnmatch_lines(["pytest-attn: * problem(s) over 2 workers, longest first, each whole on one worker*",
                              "worker gw0: started at * s, collected at * s; * case(s), * s of their own time, from * s"
                              " to * s*", "worker gw1: *",
                              "workers: the first ended at * s, the last at * s (* s apart)"])
    mark = second["attn_shard"]
    assert (mark["index"], mark["count"], mark["problems"]) == (1, 1, len({b["group"] for b in second["benchmarks"]}))
    assert all(b["extra_info"]["schema"] == "pytest-attn.record" for b in second["benchmarks"])
    assert second["machine_info"]["attn_devices"]
    assert _rows(one.stdout.str()) == _rows(two.stdout.str())
    assert "automatically disabled because xdist" not in two.stdout.str() + two.stderr.str()
    assert "Benchmark fixture was not used" not in two.stdout.str()
    assert not list(pytester.path.glob("exit-work-*"))  # each worker left without its libraries' exit work


@pytest.mark.e2e  # pytest-xdist: a controller and two workers (no torch: no attention run)
def test_the_workers_of_a_run_that_is_no_attention_run_exit_as_they_would(pytester):
    pytester.makeconftest(EXIT_WORK)
    pytester.makepyfile(test_plain="def test_one():\n    pass\n\n\ndef test_two():\n    pass\n")
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2")
    assert result.ret == pytest.ExitCode.OK, result.stdout.str()
    assert sorted(p.name for p in pytester.path.glob("exit-work-*")) == ["exit-work-gw0", "exit-work-gw1"]


def test_shards_split_the_problems_record_their_share_and_merge_back(pytester, one_process):
    _, names = one_process
    shards = [pytester.runpytest(*ARGS, f"--attn-shard={i}/2", f"--benchmark-json=s{i}.json") for i in (1, 2)]
    assert all(s.ret == pytest.ExitCode.OK for s in shards)
    runs = [json.loads((pytester.path / f"s{i}.json").read_text()) for i in (1, 2)]
    mine = [{b["fullname"] for b in run["benchmarks"]} for run in runs]
    assert not mine[0] & mine[1]
    assert mine[0] | mine[1] == names, [s.stdout.str() for s in shards]
    marks = [run["attn_shard"] for run in runs]
    assert [(m["index"], m["count"]) for m in marks] == [(1, 2), (2, 2)]
    assert marks[0]["selection"] == marks[1]["selection"]  # under xdist: test_two_workers_give_the_same_...
    from pytest_attn.verdicts.cli import main

    merged = pytester.path / "merged.json"
    assert main(["merge", str(pytester.path / "s1.json"), str(pytester.path / "s2.json"), "--json", str(merged),
                 "--baseline", "off"]) == 0
    assert {b["fullname"] for b in json.loads(merged.read_text())["benchmarks"]} == names


PINNED_CONFTEST = """
import os

import pytest

from pytest_attn.engine.nvml import VisibleGpu
from pytest_attn.plugin import prepare_attention_run, session, workers

GPUS = [VisibleGpu(0, "GPU-aaaa", "NVIDIA H200", None), VisibleGpu(1, "GPU-bbbb", "NVIDIA H200", None)]
workers.visible_devices = lambda: GPUS  # NVML, as the controller would see two GPUs
session.visible_devices = lambda: GPUS


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    prepare_attention_run(config)
"""
PINNED_SUITE = """
import os


def test_pinned():
    worker = os.environ["PYTEST_XDIST_WORKER"]
    assert os.environ["CUDA_VISIBLE_DEVICES"] == {"gw0": "GPU-aaaa", "gw1": "GPU-bbbb"}[worker]
"""


@pytest.mark.e2e  # pytest-xdist: three runs of a controller and its workers
def test_workers_are_pinned_by_uuid_and_too_many_are_refused(pytester):
    pytester.makeconftest(PINNED_CONFTEST)
    pytester.makepyfile(test_pinned=PINNED_SUITE)
    pinned = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "2", "--attn-backends=sdpa-math")
    assert pinned.ret == pytest.ExitCode.OK, pinned.stdout.str()
    auto = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "auto", "--attn-backends=sdpa-math")
    assert auto.ret == pytest.ExitCode.OK and re.search(r"created: 2/2 workers|2 workers \[", auto.stdout.str())
    refused = pytester.runpytest_subprocess("-p", "no:cacheprovider", "-n", "3", "--attn-backends=sdpa-math")
    assert refused.ret == pytest.ExitCode.USAGE_ERROR
    refused.stderr.fnmatch_lines(["*-n 3 asks for 3 workers but this run may use 2 GPU(s) (GPU-aaaa, GPU-bbbb)*"])


def test_a_worker_hands_its_records_to_the_controller():
    from factories import record

    from pytest_attn.plugin.handover import RECORD, SKIP, Collector

    r = record("flash-attn", 1e-3, test="t.py::test[a]")
    from pytest_attn.plugin.options import AttnOptions
    from pytest_attn.plugin.session import AttnSession, GateOptions
    from pytest_attn.verdicts.rule import Thresholds

    session = AttnSession(types.SimpleNamespace(), AttnOptions(),
                          GateOptions(Thresholds(), "auto", Path("baselines"), False, False, None))
    config = types.SimpleNamespace(stash={workers.ATTN_SESSION: session})
    collector = Collector(config)
    report = types.SimpleNamespace(when="call", skipped=False, nodeid="t.py::test[a]",
                                   user_properties=[(RECORD, json.dumps(r.to_json()))])
    collector.pytest_runtest_logreport(report)
    collector.pytest_runtest_logreport(report)  # reported twice (a rerun plugin): kept once
    skipped = types.SimpleNamespace(when="setup", skipped=True, nodeid="t.py::test[b]",
                                    user_properties=[(SKIP, "no CUDA device")])
    collector.pytest_runtest_logreport(skipped)
    assert session.results.records == [r] and session.results.skips == ["no CUDA device"]


def test_an_ab_cases_own_time_in_the_busy_lines_is_its_arms_set_up_pairs_and_records():
    """Arm A's record holds only its own timing: the worker's busy line adds the whole A/B case (4 x H200: its
    spans read 55 % in cases, where the arms' set-up, pairs and records filled 96 %)."""
    from factories import record

    from pytest_attn.plugin.handover import AB_RESULT, RECORD, Collector
    from pytest_attn.plugin.options import AttnOptions
    from pytest_attn.plugin.session import AttnSession, GateOptions
    from pytest_attn.verdicts.ab.paired import AbResult, Paired
    from pytest_attn.verdicts.rule import Thresholds

    session = AttnSession(types.SimpleNamespace(), AttnOptions(),
                          GateOptions(Thresholds(), "auto", Path("baselines"), False, False, None))
    collector = Collector(types.SimpleNamespace(stash={workers.ATTN_SESSION: session}))
    node = types.SimpleNamespace(gateway=types.SimpleNamespace(id="gw0"))
    plain, paired = record("flash-attn", 1e-3, test="t.py::test[a]"), record("sdpa-math", 1e-3, test="t.py::test[b]")
    result = AbResult("t.py::test[b]", "b", "g", "sdpa-math", Paired("t.py::test[b]", 8, 0.0, 0.01, "SAME"), 1e-3,
                      1e-3, elapsed_s=3.0, prepare_s=2.0, records_s=0.5)
    for r, more in ((plain, []), (paired, [(AB_RESULT, json.dumps(result.to_json()))])):
        collector.pytest_runtest_logreport(types.SimpleNamespace(
            when="call", skipped=False, nodeid=r.name, node=node, start=1.0, stop=2.0,
            user_properties=[(RECORD, json.dumps(r.to_json())), *more]))
    track = collector.tracks.of("gw0")
    assert track.cases == 2 and track.cases_s == pytest.approx(plain.timing.elapsed_s + 5.5)


def _shard_file(path, records, shard=None):
    """A shard's JSON as the plugin writes it: each benchmark's extra_info is its record."""
    path.write_text(json.dumps({"machine_info": {}, **({"attn_shard": shard} if shard else {}), "benchmarks": [
        {"fullname": r.name, "name": r.name, "group": r.case.group, "stats": {"median": r.median_s},
         "extra_info": r.to_json()} for r in records]}))
    return str(path)


def test_a_merge_of_one_shard_of_two_fails_naming_the_missing_one_unless_allowed(tmp_path, capsys):
    from factories import record

    from pytest_attn.plugin.sharding import shard_mark
    from pytest_attn.verdicts.cli import main

    problems = ["gpt2", "llama"]
    a = _shard_file(tmp_path / "s1.json", [record("flash-attn", 1e-3, test="t.py::test[fa]")],
                    shard_mark(1, 2, problems))
    assert main(["merge", a, "--baseline", "off"]) == 4
    out = capsys.readouterr().out
    assert f"pytest-attn merge: shard 2/2 is missing (have: {a} is 1/2). Merge every shard of one run" in out
    assert "--allow-partial" in out and "results" not in out
    merged = tmp_path / "m.json"
    assert main(["merge", a, "--baseline", "off", "--allow-partial", "--json", str(merged)]) == 0
    out = capsys.readouterr().out
    assert f"--allow-partial: merged anyway, marked partial: shard 2/2 is missing (have: {a} is 1/2)" in out
    assert json.loads(merged.read_text())["attn_partial"]["reason"].startswith("merged with --allow-partial: shard 2/2")
    b = _shard_file(tmp_path / "s2.json", [record("sdpa-cudnn", 2e-3, test="t.py::test[cudnn]")],
                    shard_mark(2, 2, problems))
    assert main(["merge", a, b, "--baseline", "off"]) == 0
    other = _shard_file(tmp_path / "o2.json", [record("sdpa-cudnn", 2e-3, test="t.py::test[cudnn]")],
                        shard_mark(2, 2, [*problems, "qwen"]))  # shard 2 of another selection
    assert main(["merge", a, other, "--baseline", "off"]) == 4
    assert "the shards are of different runs" in capsys.readouterr().out
    plain = _shard_file(tmp_path / "p.json", [record("sdpa-cudnn", 2e-3, test="t.py::test[cudnn]")])
    assert main(["merge", a, plain, "--baseline", "off"]) == 4
    assert f"{plain} is not a shard (run without --attn-shard)" in capsys.readouterr().out


def test_the_merge_command_reports_without_a_baseline_and_refuses_a_missing_one(tmp_path, capsys):
    from factories import record

    from pytest_attn.verdicts.cli import main

    a = _shard_file(tmp_path / "a.json", [record("flash-attn", 1e-3, test="t.py::test[fa]")])
    b = _shard_file(tmp_path / "b.json", [record("sdpa-cudnn", 2e-3, test="t.py::test[cudnn]")])
    assert main(["merge", a, b, "--report", str(tmp_path / "rep"), "--baseline", "off"]) == 0
    out = capsys.readouterr().out
    assert "merged 2 file(s): 2 results" in out and f"wrote {tmp_path / 'rep' / 'summary.md'}" in out
    assert "t.py::test[cudnn]" in (tmp_path / "rep" / "results.csv").read_text()  # every result, as NEW
    assert main(["merge", a, b, "--baseline", str(tmp_path / "missing.json")]) == 4
    assert "missing.json cannot be read" in capsys.readouterr().out
    assert main(["merge", a, a]) == 4
    assert "shards must not overlap" in capsys.readouterr().out


def test_the_controller_compares_saved_runs_without_their_gpu_entries():
    """Before the workers probe their GPUs the controller's machine_info has none: pytest-benchmark's check
    must not warn for that, and the saved run is left as it was."""
    options = {"dist": "loadgroup", "tx": ["popen", "popen"]}
    controller = types.SimpleNamespace(getoption=lambda name, default=None: options.get(name, default))
    saved = {"machine_info": {"node": "n", "attn_device": {"name": "NVIDIA H200"}}}
    seen = []
    hook = workers.pytest_benchmark_compare_machine_info(controller, saved)
    next(hook)
    seen.append(dict(saved["machine_info"]))
    with pytest.raises(StopIteration):
        hook.send(None)
    assert seen == [{"node": "n"}] and saved["machine_info"]["attn_device"] == {"name": "NVIDIA H200"}
    alone = types.SimpleNamespace(getoption=lambda name, default=None: {"dist": "no"}.get(name, default))
    hook = workers.pytest_benchmark_compare_machine_info(alone, saved)
    next(hook)
    assert "attn_device" in saved["machine_info"]  # one process: its machine_info has its GPU, compared in full


@pytest.mark.parametrize("content, says", [
    (b"\x1f\x8b\x08\x00junk", "is gzip-compressed; decompress it first (gunzip -k "),
    ('{"benchmarks": []}'.encode("utf-16"), "is UTF-16 text, not UTF-8"),
    (b'{"benchmarks": [1]}', "benchmark #0 has no name"),
    (b'{"benchmarks": {"a": 1}}', "has no 'benchmarks' list"),
    (b'{"benchmarks": [], "machine_info": []}', "machine_info is [], not an object"),
    (b'{"benchmarks": [], "attn_shard": {"index": "1", "count": 2}}', "its attn_shard mark"),
    (b'{"benchmarks": [{"name": "x", "stats": {"median": 1.0}, "extra_info": {"schema": "pytest-attn.record",'
     b' "version": 1, "timing": [1, 2]}}]}', "benchmark 'x' has an unreadable result record"),
    (b'{"benchmarks": [{"name": "x", "stats": {"median": 1.0}}, {"name": "x", "stats": {"median": 2.0}}]}',
     "benchmark 'x' is stored twice (#0 and #1)"),
])
def test_a_shard_that_is_not_a_run_is_bad_input_named_with_exit_4(tmp_path, capsys, content, says):
    """Each of these gave exit 1 -- "the gate failed" -- with a traceback; a malformed shard mark was read as a
    missing shard. Every file goes through one reader and one check: exit 4 and what is wrong with which file."""
    from pytest_attn.verdicts.cli import main

    bad = tmp_path / "bad.json"
    bad.write_bytes(content)
    assert main(["merge", str(bad), "--baseline", "off"]) == 4
    out = capsys.readouterr().out
    assert out.startswith("pytest-attn merge: ") and str(bad) in out and says in out, out
    assert "Traceback" not in out


def test_the_merge_command_refuses_bad_options_and_unwritable_paths_with_exit_4(tmp_path, capsys):
    """--threshold=abc said "invalid <lambda> value" and exited 2; an unwritable --json or --report path was met
    after the merge, as a traceback with exit 1."""
    from factories import record

    from pytest_attn.verdicts.cli import main

    a = _shard_file(tmp_path / "a.json", [record("flash-attn", 1e-3, test="t.py::test[fa]")])
    with pytest.raises(SystemExit) as stopped:
        main(["merge", a, "--threshold=abc"])
    assert stopped.value.code == 4
    err = capsys.readouterr().err
    assert "--threshold 'abc' is not a number or a percentage (e.g. 5% or 0.05)" in err and "lambda" not in err
    with pytest.raises(SystemExit) as stopped:  # named by the command's own flag, not the plugin's --attn-fail-on
        main(["merge", a, "--fail-on=slowr"])
    err = capsys.readouterr().err
    assert stopped.value.code == 4 and "--fail-on: 'slowr' is not a list of verdicts: give one or more of" in err
    assert "--attn-" not in err
    (tmp_path / "afile").write_text("")
    for flag, path in (("--json", tmp_path / "afile" / "m.json"), ("--report", tmp_path / "afile" / "rep")):
        assert main(["merge", a, "--baseline", "off", flag, str(path)]) == 4
        out = capsys.readouterr().out
        assert f"pytest-attn merge: {flag}: cannot write in " in out and "results" not in out, out


def test_auto_counts_gpus_even_where_xdist_registered_after_this_plugin(monkeypatch):
    # loaded with -p (no install: the workflow script's host), this plugin registers before xdist, and xdist's own
    # answer (the CPU count) came first: -n auto on one H200 asked for 32 workers
    import pluggy
    from xdist import newhooks
    from xdist import plugin as xdist_plugin

    monkeypatch.setattr(workers, "_is_attention_suite", lambda config: True)
    monkeypatch.setattr(workers, "visible_devices", lambda: ["GPU-a"])
    manager = pluggy.PluginManager("pytest")
    manager.add_hookspecs(newhooks)
    manager.register(types.SimpleNamespace(pytest_xdist_auto_num_workers=workers.pytest_xdist_auto_num_workers))
    manager.register(xdist_plugin)
    assert manager.hook.pytest_xdist_auto_num_workers(config=types.SimpleNamespace(option=None)) == 1
