"""The scheduler pytest-attn gives pytest-xdist (pytest_attn.plugin.scheduling): whole problems, longest first, to
the worker that asks first; a worker that dies fails only its test and its problem's rest goes whole to another;
a replacement takes the dead worker's GPU. xdist's workers are faked here (their protocol: send_runtest_some,
shutdown, shutting_down); tests/test_workers_die.py runs real ones."""

from __future__ import annotations

import json
import types

import pytest

from pytest_attn.core.schedule import Facts, Unit
from pytest_attn.plugin.handover import GPUS, SEAT, read_plan
from pytest_attn.plugin.scheduling import CostScheduling, elapsed_by_name, problem_of, saved_times
from pytest_attn.plugin.session import PINNED
from pytest_attn.plugin.workers import Seats, first_call_share, pin


class Node:
    """A pytest-xdist WorkerController as the scheduler sees it."""

    def __init__(self, name: str) -> None:
        self.gateway = types.SimpleNamespace(id=name)
        self.sent: list[int] = []
        self.shutting_down = False

    def send_runtest_some(self, indices):
        assert not self.shutting_down, "work sent to a worker told to finish"
        self.sent.extend(indices)

    def shutdown(self):
        self.shutting_down = True


COLLECTION = ["t.py::t[a-small]", "t.py::t[b-small]", "t.py::t[a-big]", "t.py::t[b-big]", "t.py::t[a-mid]"]
UNITS = [Unit("big", ("t.py::t[a-big]", "t.py::t[b-big]"), 9.0), Unit("mid", ("t.py::t[a-mid]",), 4.0),
         Unit("small", ("t.py::t[a-small]", "t.py::t[b-small]"), 2.0)]


def scheduler(reports=None):
    config = types.SimpleNamespace(hook=types.SimpleNamespace(
        pytest_collectreport=lambda report: (reports if reports is not None else []).append(report)))
    planned = []

    def planner(collection, worker, workers):
        planned.append((list(collection), worker, workers))
        return list(UNITS)

    return CostScheduling(config, planner, 2), planned


def named(node):
    return [COLLECTION[i] for i in node.sent]


def test_the_run_starts_with_the_first_worker_and_the_longest_problem_goes_first():
    sched, planned = scheduler()
    gw0, gw1 = Node("gw0"), Node("gw1")
    sched.add_node(gw0)
    sched.add_node(gw1)
    assert not sched.collection_is_completed
    sched.add_node_collection(gw0, COLLECTION)
    assert sched.collection_is_completed  # gw1 is still collecting (or compiling): gw0 starts now
    sched.schedule()
    assert planned == [(COLLECTION, "gw0", 2)]
    assert named(gw0) == ["t.py::t[a-big]", "t.py::t[b-big]"]  # two ahead: one problem of two tests
    sched.add_node_collection(gw1, COLLECTION)
    sched.schedule()
    assert named(gw1) == ["t.py::t[a-mid]", "t.py::t[a-small]", "t.py::t[b-small]"]  # a one-test problem: one more
    assert gw1.shutting_down and gw0.shutting_down  # nothing left: each told to finish what it has
    assert not sched.tests_finished  # gw0 has two to run, gw1 three
    for i in list(gw1.sent):
        sched.mark_test_complete(gw1, i)
    for i in list(gw0.sent)[:1]:
        sched.mark_test_complete(gw0, i)
    assert sched.tests_finished and sched.has_pending  # gw0 runs its last test as it shuts down


def test_a_worker_leaves_a_problem_for_each_worker_still_starting():
    """Problems of one test each: the first worker ready holds its one (xdist's worker runs a test once it knows
    the next) rather than take the second, which the other worker gets once it has collected."""
    sched, _ = scheduler()
    sched.planner = lambda collection, worker, workers: [Unit("x", ("t.py::t[a-mid]",), 2.0),
                                                         Unit("y", ("t.py::t[a-small]",), 1.0)]
    gw0, gw1 = Node("gw0"), Node("gw1")
    for node in (gw0, gw1):
        sched.add_node(node)
    sched.add_node_collection(gw0, COLLECTION)
    sched.schedule()
    assert named(gw0) == ["t.py::t[a-mid]"] and not gw0.shutting_down
    sched.add_node_collection(gw1, COLLECTION)
    sched.schedule()
    assert named(gw1) == ["t.py::t[a-small]"] and named(gw0) == ["t.py::t[a-mid]"]
    assert gw0.shutting_down and gw1.shutting_down  # each runs its one as it finishes


def test_a_look_ahead_leaves_the_longest_problems_to_the_workers_still_starting():
    """Single cases (a paired A/B): the first worker ready takes the longest and, to stay a test ahead, the fourth;
    the second and third go to the two workers that collect after it."""
    sched, _ = scheduler()
    sched.workers = 3
    order = ["t.py::t[a-big]", "t.py::t[b-big]", "t.py::t[a-mid]", "t.py::t[a-small]", "t.py::t[b-small]"]
    sched.planner = lambda collection, worker, workers: [Unit(t, (t,), 5.0 - i) for i, t in enumerate(order)]
    nodes = [Node(f"gw{i}") for i in range(3)]
    for node in nodes:
        sched.add_node(node)
    sched.add_node_collection(nodes[0], COLLECTION)
    sched.schedule()
    assert named(nodes[0]) == ["t.py::t[a-big]", "t.py::t[a-small]"]
    for node in nodes[1:]:
        sched.add_node_collection(node, COLLECTION)
        sched.schedule()
    assert [named(n)[0] for n in nodes[1:]] == ["t.py::t[b-big]", "t.py::t[a-mid]"]


def test_a_worker_that_asks_first_takes_the_next_problem():
    sched, _ = scheduler()
    gw0, gw1 = Node("gw0"), Node("gw1")
    for node in (gw0, gw1):
        sched.add_node(node)
        sched.add_node_collection(node, COLLECTION)
    sched.schedule()
    assert named(gw0) == ["t.py::t[a-big]", "t.py::t[b-big]"] and named(gw1) == ["t.py::t[a-mid]",
                                                                                 "t.py::t[a-small]",
                                                                                 "t.py::t[b-small]"]


def test_a_worker_that_dies_fails_its_test_and_its_problems_rest_goes_whole_to_the_next():
    sched, _ = scheduler()
    units = [Unit("p", ("t.py::t[a-big]", "t.py::t[b-big]", "t.py::t[a-mid]"), 9.0),
             Unit("q", ("t.py::t[a-small]", "t.py::t[b-small]"), 2.0)]
    sched.planner = lambda collection, worker, workers: list(units)
    gw0 = Node("gw0")
    sched.add_node(gw0)
    sched.add_node_collection(gw0, COLLECTION)
    sched.schedule()
    assert named(gw0) == ["t.py::t[a-big]", "t.py::t[b-big]", "t.py::t[a-mid]"]
    sched.mark_test_complete(gw0, COLLECTION.index("t.py::t[a-big]"))
    assert sched.remove_node(gw0) == "t.py::t[b-big]"  # what xdist reports as the crash
    gw2 = Node("gw2")  # xdist's replacement
    sched.add_node(gw2)
    sched.add_node_collection(gw2, COLLECTION)
    sched.schedule()
    assert named(gw2) == ["t.py::t[a-mid]", "t.py::t[a-small]", "t.py::t[b-small]"]  # the rest first, then q
    assert sched.remove_node(gw2) == "t.py::t[a-mid]"
    assert sched.queue == [Unit("the rest of gw2's work", ("t.py::t[a-small]", "t.py::t[b-small]"), 0.0)]


def test_a_worker_that_finished_leaves_nothing_behind():
    sched, _ = scheduler()
    gw0 = Node("gw0")
    sched.add_node(gw0)
    sched.add_node_collection(gw0, COLLECTION)
    sched.schedule()
    done = 0
    while done < len(gw0.sent):  # each test as the worker runs it; more come as it asks
        sched.mark_test_complete(gw0, gw0.sent[done])
        done += 1
    assert sorted(named(gw0)) == sorted(COLLECTION)
    assert gw0.shutting_down and sched.remove_node(gw0) is None and not sched.has_pending


def test_a_worker_that_collected_other_tests_gets_no_work_and_is_reported():
    reports = []
    sched, _ = scheduler(reports)
    gw0, gw1 = Node("gw0"), Node("gw1")
    for node in (gw0, gw1):
        sched.add_node(node)
    sched.add_node_collection(gw0, COLLECTION)
    sched.add_node_collection(gw1, COLLECTION[:-1])
    sched.schedule()
    assert gw1.sent == [] and gw1.shutting_down
    assert len(reports) == 1 and reports[0].failed and "gw1" in str(reports[0].longrepr)


def test_a_replacement_takes_the_gpu_of_the_worker_that_died():
    seats = Seats(2)
    assert (seats.take("gw0"), seats.take("gw1")) == (0, 1)
    seats.free("gw1")
    assert seats.take("gw2") == 1 and seats.of("gw1") == 1  # the dead one's failure still names its GPU
    assert seats.take("gw3") is None  # both held
    env: dict[str, str] = {}
    assert pin({"workerid": "gw2", GPUS: ["GPU-a", "GPU-b"], SEAT: 1}, env) == (1, "GPU-b")
    assert env["CUDA_VISIBLE_DEVICES"] == "GPU-b"
    with pytest.raises(pytest.UsageError, match="worker gw3 has no GPU: 2 GPU"):
        pin({"workerid": "gw3", GPUS: ["GPU-a", "GPU-b"], SEAT: None}, {})
    assert pin({"workerid": "gw1", GPUS: ["GPU-a", "GPU-b"]}, {}) == (1, "GPU-b")  # GPUs given without a seat


def test_a_worker_on_one_of_several_gpus_makes_its_share_of_the_first_calls():
    def worker(pinned, gpus):
        return types.SimpleNamespace(stash={PINNED: pinned} if pinned else {}, workerinput={GPUS: gpus})

    assert first_call_share(worker((1, "GPU-b"), ["GPU-a", "GPU-b"])) == (1, 2)
    assert first_call_share(worker((0, "GPU-a"), ["GPU-a"])) is None  # alone on the host's one GPU: all of them
    assert first_call_share(worker(None, [])) is None  # a CPU worker compiles nothing
    assert first_call_share(types.SimpleNamespace(stash={})) is None  # one process


def test_the_plan_reads_what_a_worker_collected_and_the_times_of_saved_runs(tmp_path):
    from factories import record

    (tmp_path / "gw0.json").write_text(json.dumps({"t.py::t[x]": {"name": "t.py::t[x]", "problem": "p",
                                                                    "backend": "fa", "flops": 5, "min_bytes": 6}}))
    assert read_plan(tmp_path, "gw0") == {"t.py::t[x]": Facts("t.py::t[x]", "p", "fa", 5, 6)}
    assert read_plan(tmp_path, "gw1") is None  # a remote worker writes none
    assert problem_of("t.py::t[x]@p") == "p" and problem_of("t.py::t[a@b]") == "t.py::t[a@b]"
    r = record("flash-attn", 1e-3, test="t.py::t[fa]")
    run = {"benchmarks": [{"fullname": r.name, "name": r.name, "group": r.case.group, "stats": {"median": 1e-3},
                           "extra_info": r.to_json()}]}
    assert elapsed_by_name(run) == {"t.py::t[fa]": r.timing.elapsed_s}
    machine = tmp_path / "storage" / "Linux-CPython-3.11-64bit"
    machine.mkdir(parents=True)
    (machine / "0001_old.json").write_text(json.dumps(run))
    config = types.SimpleNamespace(getoption=lambda name, default=None: f"file://{tmp_path / 'storage'}")
    assert saved_times(config) == {"t.py::t[fa]": r.timing.elapsed_s}


def test_an_unrelated_projects_workers_are_left_to_xdist(pytester):
    """The plugin's own package holds prepare_attention_run: it was taken for a conftest that prepares an
    attention run, so every project's -n got pytest-attn's scheduler (and NVML imported at start-up)."""
    from pytest_attn.plugin import workers
    from pytest_attn.plugin.scheduling import pytest_xdist_make_scheduler

    plain = pytester.parseconfig("-p", "no:cacheprovider")
    assert not workers._is_attention_suite(plain)
    assert pytest_xdist_make_scheduler(plain, None) is None
    pytester.makeconftest("from pytest_attn.plugin import prepare_attention_run\n")
    assert workers._is_attention_suite(pytester.parseconfig("-p", "no:cacheprovider"))
